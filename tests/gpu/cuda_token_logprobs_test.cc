// cuda::TokenLogprobs against a transcription of AppendLogprobs (worker/logits_processor.cc):
// log-softmax of the raw row at a chosen token, and the top tokens by descending logit, ties by
// lower id. The top ids must be equal; the logprobs within kTolerance: both sides take the same
// float maximum and sum exp in double (only the order of the sum differs, ~1e-16 relative), so
// the float log-sum differs by at most an ulp or two, 4e-6 at the magnitudes here (< 64).
// Rows are picked through a permuted row index; bf16-quantized rows make ties common.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/token_logprobs.h"
#include "tests/gpu/gpu_test_util.h"

namespace tpserve::cuda {
namespace {

constexpr float kTolerance = 1e-5f;

struct Expected {
  float logprob;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

Expected Reference(const float* row, int64_t vocab, int32_t token, int32_t top) {
  const float max = *std::max_element(row, row + vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i] - max));
  const float log_sum = max + static_cast<float>(std::log(sum));
  Expected e{row[token] - log_sum, {}, {}};
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + top, ids.end(), [&](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  for (int32_t j = 0; j < top; ++j) {
    e.top_ids.push_back(ids[j]);
    e.top_logprobs.push_back(row[ids[j]] - log_sum);
  }
  return e;
}

// Within kTolerance; a banned token's -inf exactly.
void ExpectClose(float got, float want) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want);
  } else {
    EXPECT_NEAR(got, want, kTolerance);
  }
}

using gpu_test::Download;
using gpu_test::Upload;

TEST(CudaTokenLogprobsSupportedTest, RefusesBadParameters) {
  float f = 0.0f;
  int32_t i = 0;
  TokenLogprobsParams p{&f, &i, &i, &f, 0, nullptr, nullptr, 1, 1, 1};
  EXPECT_TRUE(TokenLogprobsSupported(p).ok());
  p.top = 2;  // more than the vocabulary of 1
  EXPECT_FALSE(TokenLogprobsSupported(p).ok());
  p.vocab = 100;
  EXPECT_FALSE(TokenLogprobsSupported(p).ok());  // top > 0 without top arrays
  p.top_ids = &i;
  p.top_logprobs = &f;
  EXPECT_TRUE(TokenLogprobsSupported(p).ok());
  p.top = 21;
  EXPECT_FALSE(TokenLogprobsSupported(p).ok());
  EXPECT_TRUE(
      TokenLogprobs({nullptr, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0, 0, 9}, nullptr)
          .ok());
}

TEST(CudaTokenLogprobsTest, MatchesTheCpu) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  absl::StatusOr<CudaStream> created = CudaStream::Create();
  ASSERT_TRUE(created.ok()) << created.status();
  const cudaStream_t stream = created->get();
  for (const int64_t vocab : {int64_t{20}, int64_t{1000}, int64_t{49152}, int64_t{128256}}) {
    for (const int32_t top : {0, 1, 5, 20}) {
      SCOPED_TRACE(absl::StrCat("vocab ", vocab, " top ", top));
      const int64_t num_tokens = 7;
      std::mt19937 rng(static_cast<uint32_t>(vocab + top));
      std::normal_distribution<float> normal(0.0f, 4.0f);
      std::vector<float> logits(num_tokens * vocab);
      for (float& v : logits) v = normal(rng);
      for (int64_t i = 0; i < vocab; ++i) {  // row 2: bf16 ties; row 3: banned tokens
        logits[2 * vocab + i] = ToFloat(ToBf16(logits[2 * vocab + i]));
        if (i % 3 == 0) logits[3 * vocab + i] = -std::numeric_limits<float>::infinity();
      }
      const std::vector<int32_t> rows = {6, 2, 3, 0, 2};
      std::vector<int32_t> tokens;
      for (size_t r = 0; r < rows.size(); ++r) {
        tokens.push_back(static_cast<int32_t>(rng() % (vocab / 3)) * 3 + 1);  // never banned
      }
      DeviceBuffer<float> logits_dev = Upload(logits, stream);
      DeviceBuffer<int32_t> rows_dev = Upload(rows, stream);
      DeviceBuffer<int32_t> tokens_dev = Upload(tokens, stream);
      DeviceBuffer<float> logprobs_dev = Upload(std::vector<float>(rows.size()), stream);
      const size_t top_size = std::max<size_t>(1, rows.size() * top);
      DeviceBuffer<int32_t> top_ids_dev = Upload(std::vector<int32_t>(top_size, -1), stream);
      DeviceBuffer<float> top_logprobs_dev = Upload(std::vector<float>(top_size), stream);
      const TokenLogprobsParams p{logits_dev.data(),
                                  rows_dev.data(),
                                  tokens_dev.data(),
                                  logprobs_dev.data(),
                                  top,
                                  top_ids_dev.data(),
                                  top_logprobs_dev.data(),
                                  num_tokens,
                                  static_cast<int64_t>(rows.size()),
                                  vocab};
      const absl::Status status = TokenLogprobs(p, stream);
      ASSERT_TRUE(status.ok()) << status;
      const std::vector<float> logprobs = Download(logprobs_dev, stream);
      const std::vector<int32_t> top_ids = Download(top_ids_dev, stream);
      const std::vector<float> top_logprobs = Download(top_logprobs_dev, stream);
      for (size_t r = 0; r < rows.size(); ++r) {
        const Expected want = Reference(logits.data() + rows[r] * vocab, vocab, tokens[r], top);
        ExpectClose(logprobs[r], want.logprob);
        for (int32_t j = 0; j < top; ++j) {
          SCOPED_TRACE(absl::StrCat("entry ", r, " top ", j));
          EXPECT_EQ(top_ids[r * top + j], want.top_ids[j]);
          ExpectClose(top_logprobs[r * top + j], want.top_logprobs[j]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tpserve::cuda
