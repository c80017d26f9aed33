// cuda::ApplyTokenBitmask against ApplyBitmask (worker/logits_processor.h): the same -inf
// positions and the same untouched logits, exactly, on a vocabulary that is not a multiple of 32
// (the last word's spare bits set, and ignored), with empty words, full words and one-token rows.
// Every test needs a device except the parameter checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/token_bitmask.h"
#include "tests/gpu/gpu_test_util.h"
#include "worker/logits_processor.h"

namespace tpserve::cuda {
namespace {

TEST(CudaTokenBitmaskSupportedTest, RefusesBadParameters) {
  float logits = 0.0f;
  uint32_t mask = 1;
  EXPECT_TRUE(ApplyTokenBitmaskSupported({&logits, &mask, 1, 1}).ok());
  EXPECT_FALSE(ApplyTokenBitmaskSupported({&logits, &mask, 1, 0}).ok());
  EXPECT_FALSE(ApplyTokenBitmaskSupported({&logits, &mask, -1, 1}).ok());
  EXPECT_FALSE(ApplyTokenBitmaskSupported({&logits, nullptr, 1, 1}).ok());
  EXPECT_FALSE(ApplyTokenBitmaskSupported({&logits, &mask, 65536, 1}).ok());
  EXPECT_TRUE(ApplyTokenBitmask({nullptr, nullptr, 0, 1000}, nullptr).ok());
}

TEST(CudaTokenBitmaskTest, MatchesTheCpuMask) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  absl::StatusOr<CudaStream> stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  const int64_t rows = 6, vocab = 32000 + 7;
  const int64_t words = BitmaskWords(vocab);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(rows * vocab);
  for (float& v : logits) v = normal(rng);
  std::vector<uint32_t> mask(rows * words);
  for (uint32_t& w : mask) w = static_cast<uint32_t>(rng());
  for (int64_t w = 0; w < words; w += 5) mask[w] = 0;                 // row 0: empty words
  for (int64_t w = 0; w < words; w += 3) mask[words + w] = ~0u;       // row 1: full words
  std::fill(mask.begin() + 2 * words, mask.begin() + 3 * words, 0u);  // row 2: token vocab - 1
  mask[2 * words + (vocab - 1) / 32] = 1u << ((vocab - 1) % 32);
  std::fill(mask.begin() + 3 * words, mask.begin() + 4 * words, ~0u);  // row 3: everything

  std::vector<float> want = logits;
  for (int64_t r = 0; r < rows; ++r) {
    ApplyBitmask(absl::MakeConstSpan(mask).subspan(r * words, words),
                 absl::MakeSpan(want).subspan(r * vocab, vocab));
  }
  absl::StatusOr<DeviceBuffer<float>> logits_dev = DeviceBuffer<float>::Allocate(logits.size());
  absl::StatusOr<DeviceBuffer<uint32_t>> mask_dev = DeviceBuffer<uint32_t>::Allocate(mask.size());
  ASSERT_TRUE(logits_dev.ok() && mask_dev.ok());
  ASSERT_TRUE(logits_dev->CopyFromHost(logits, stream->get()).ok());
  ASSERT_TRUE(mask_dev->CopyFromHost(mask, stream->get()).ok());
  const absl::Status status =
      ApplyTokenBitmask({logits_dev->data(), mask_dev->data(), rows, vocab}, stream->get());
  ASSERT_TRUE(status.ok()) << status;
  std::vector<float> got(logits.size());
  ASSERT_TRUE(logits_dev->CopyToHost(absl::MakeSpan(got), stream->get()).ok());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tpserve::cuda
