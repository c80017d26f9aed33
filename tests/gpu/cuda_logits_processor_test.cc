// cuda::CudaLogitsProcessor against CpuLogitsProcessor on the same logits rows, in passes of
// kPassRows rows so that sequences straddle passes:
//  - greedy picks, one-token and random allow-list masks, and greedy draft verification: the
//    CPU's tokens exactly;
//  - seeded sampling (the CPU's uniform number, the device's kept set): the CPU's token in at
//    least kSeededAgreement of kSeededDraws draws. Not 100%: the device weighs tokens with CUDA's
//    expf (within 2 ulp of glibc's) truncated to 2^-40 of the top token, the CPU with exp summed in
//    double, so each cumulative boundary moves by about 1e-7 of the mass, and a uniform number
//    that close to one picks the neighbour (at most ~1.2e-7 · kept tokens per draw, ≤ 0.4% for
//    32,000 kept tokens with every error of one sign; typically far less). top-p and min-p cuts
//    move the same way.
//  - logprobs and top logprobs within kLogprobTolerance (tests/gpu/cuda_token_logprobs_test.cc),
//    top ids equal;
//  - what falls back to the host (penalties, Score rows, sampling verification of drafts): the
//    CPU's results exactly, since the CPU processor runs on copies of the same rows.
#include "worker/cuda/cuda_logits_processor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/device_buffer.h"
#include "tests/gpu/gpu_test_util.h"
#include "worker/logits_processor.h"

namespace tpserve::cuda {
namespace {

constexpr int64_t kVocab = 32000;
constexpr int64_t kPassRows = 3;
constexpr int kSeededDraws = 600;
constexpr double kSeededAgreement = 0.99;
constexpr float kLogprobTolerance = 1e-5f;

std::vector<float> RandomRows(int64_t rows, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(rows * kVocab);
  for (float& v : logits) v = normal(rng);
  return logits;
}

std::vector<uint32_t> OneTokenMask(int32_t token) {
  std::vector<uint32_t> mask(BitmaskWords(kVocab), 0u);
  mask[token / 32] = 1u << (token % 32);
  return mask;
}

void ExpectSameLogprobs(const LogitsResult& got, const LogitsResult& want) {
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  for (size_t i = 0; i < want.logprobs.size(); ++i) {
    EXPECT_NEAR(got.logprobs[i], want.logprobs[i], kLogprobTolerance) << "token " << i;
  }
  EXPECT_EQ(got.top_token_ids, want.top_token_ids);
  ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size());
  for (size_t i = 0; i < want.top_logprobs.size(); ++i) {
    EXPECT_NEAR(got.top_logprobs[i], want.top_logprobs[i], kLogprobTolerance) << "top " << i;
  }
}

class CudaLogitsProcessorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TP_SKIP_WITHOUT_CUDA_DEVICES(1);
    absl::StatusOr<CudaStream> stream = CudaStream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = std::make_unique<CudaStream>(*std::move(stream));
    auto processor = CudaLogitsProcessor::Create(kVocab, kPassRows, 4096, stream_->get());
    ASSERT_TRUE(processor.ok()) << processor.status();
    device_ = *std::move(processor);
  }

  // Both processors over `logits` [rows, kVocab]; every request is checked first.
  void Run(const std::vector<float>& logits, const std::vector<LogitsRequest>& requests,
           std::vector<LogitsResult>* got, std::vector<LogitsResult>* want) {
    const int64_t rows = static_cast<int64_t>(logits.size()) / kVocab;
    for (const LogitsRequest& r : requests) {
      ASSERT_TRUE(CheckLogitsRequest(r, rows, kVocab).ok()) << CheckLogitsRequest(r, rows, kVocab);
    }
    ASSERT_TRUE(CpuLogitsProcessor().Process(logits.data(), rows, kVocab, requests, want).ok());
    absl::StatusOr<DeviceBuffer<float>> on_device = DeviceBuffer<float>::Allocate(logits.size());
    ASSERT_TRUE(on_device.ok()) << on_device.status();
    ASSERT_TRUE(on_device->CopyFromHost(logits, stream_->get()).ok());
    const absl::Status status = device_->Process(on_device->data(), rows, kVocab, requests, got);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(got->size(), requests.size());
  }

  std::unique_ptr<CudaStream> stream_;
  std::unique_ptr<CudaLogitsProcessor> device_;
};

TEST_F(CudaLogitsProcessorTest, GreedyMasksAndDraftVerificationAreTheCpus) {
  const int64_t rows = 12;
  const std::vector<float> logits = RandomRows(rows, 1, 3.0f);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams sampled;  // temperature 1, no filters
  sampled.seed = 77;
  const int32_t forced = 12345;
  const std::vector<uint32_t> one_token = OneTokenMask(forced);
  std::mt19937 rng(5);
  std::vector<uint32_t> random_mask(BitmaskWords(kVocab));
  for (uint32_t& w : random_mask) w = static_cast<uint32_t>(rng()) & static_cast<uint32_t>(rng());
  // Drafts for rows 7..10: the argmax of rows 7 and 8, then a wrong guess at row 9.
  const std::vector<int32_t> drafts = {
      cpu::Argmax(&logits[7 * kVocab], kVocab), cpu::Argmax(&logits[8 * kVocab], kVocab),
      static_cast<int32_t>((cpu::Argmax(&logits[9 * kVocab], kVocab) + 1) % kVocab)};
  const std::vector<float> draft_probs(drafts.size() * kVocab, 1.0f / kVocab);

  std::vector<LogitsRequest> requests(7);
  for (int i = 0; i < 4; ++i) {  // rows 0..3, one each: greedy, with logprobs on two
    requests[i].first_row = i;
    requests[i].sample = true;
    requests[i].params = &greedy;
    requests[i].logprobs = i % 2 == 0;
    requests[i].top_logprobs = i == 2 ? 20 : 0;
  }
  requests[1].bitmask = random_mask;
  requests[4] = requests[0];  // row 4: greedy, one allowed token
  requests[4].first_row = 4;
  requests[4].bitmask = one_token;
  requests[5] = requests[4];  // row 5: sampled, one allowed token
  requests[5].first_row = 5;
  requests[5].params = &sampled;
  requests[6].first_row = 7;  // rows 7..10: three greedy drafts, the third rejected
  requests[6].num_rows = 4;
  requests[6].sample = true;
  requests[6].params = &greedy;
  requests[6].drafts = drafts;
  requests[6].draft_probs = draft_probs;  // ignored by greedy verification
  requests[6].logprobs = true;
  requests[6].top_logprobs = 3;
  // Row 6 and row 11 belong to nobody.

  std::vector<LogitsResult> got, want;
  Run(logits, requests, &got, &want);
  for (size_t s = 0; s < requests.size(); ++s) {
    SCOPED_TRACE(absl::StrCat("request ", s));
    EXPECT_EQ(got[s].tokens, want[s].tokens);
    ExpectSameLogprobs(got[s], want[s]);
  }
  EXPECT_EQ(got[4].tokens, std::vector<int32_t>{forced});
  EXPECT_EQ(got[5].tokens, std::vector<int32_t>{forced});
  EXPECT_EQ(got[6].tokens,
            (std::vector<int32_t>{drafts[0], drafts[1], cpu::Argmax(&logits[9 * kVocab], kVocab)}));
}

TEST_F(CudaLogitsProcessorTest, SeededSamplingGivesTheCpusTokens) {
  // Flat-ish rows (scale 1.5) keep thousands of tokens in play, so the draws vary.
  const std::vector<float> logits = RandomRows(kSeededDraws, 2, 1.5f);
  std::vector<SamplingParams> settings(4);
  settings[1].temperature = 0.7f;
  settings[1].top_k = 40;
  settings[2].top_p = 0.9f;
  settings[3].temperature = 0.8f;
  settings[3].top_k = 500;
  settings[3].top_p = 0.95f;
  settings[3].min_p = 0.02f;
  std::vector<SamplingParams> params(kSeededDraws);
  std::vector<LogitsRequest> requests(kSeededDraws);
  for (int i = 0; i < kSeededDraws; ++i) {
    params[i] = settings[i % settings.size()];
    params[i].seed = 1000 + i;
    requests[i].first_row = i;
    requests[i].sample = true;
    requests[i].params = &params[i];
    requests[i].output_len = i % 7;
    requests[i].logprobs = i % 5 == 0;
    requests[i].top_logprobs = i % 10 == 0 ? 5 : 0;
  }
  std::vector<LogitsResult> got, want;
  Run(logits, requests, &got, &want);
  int equal = 0;
  for (int i = 0; i < kSeededDraws; ++i) {
    ASSERT_EQ(got[i].tokens.size(), 1u);
    equal += got[i].tokens == want[i].tokens;
    if (got[i].tokens == want[i].tokens) ExpectSameLogprobs(got[i], want[i]);
  }
  std::printf("seeded draws equal to the CPU's: %d of %d\n", equal, kSeededDraws);
  EXPECT_GE(equal, kSeededAgreement * kSeededDraws);
}

TEST_F(CudaLogitsProcessorTest, HostFallbacksAreTheCpus) {
  const int64_t rows = 9;
  const std::vector<float> logits = RandomRows(rows, 3, 2.0f);
  SamplingParams penalized;
  penalized.repetition_penalty = 1.3f;
  penalized.seed = 3;
  SamplingParams sampled;
  sampled.seed = 9;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const std::vector<int32_t> prompt = {5, 6, 7}, output = {8, 8};
  const std::vector<int32_t> drafts = {cpu::Argmax(&logits[5 * kVocab], kVocab), 100};

  std::vector<LogitsRequest> requests(4);
  requests[0].first_row = 0;  // rows 0..2: Score
  requests[0].num_rows = 3;
  requests[0].return_logits = true;
  requests[1].first_row = 3;  // row 3: penalties
  requests[1].sample = true;
  requests[1].params = &penalized;
  requests[1].output_len = 2;
  requests[1].prompt = prompt;
  requests[1].output = output;
  requests[1].logprobs = true;
  requests[2].first_row = 5;  // rows 5..7: sampling verification of two point-mass drafts
  requests[2].num_rows = 3;
  requests[2].sample = true;
  requests[2].params = &sampled;
  requests[2].drafts = drafts;
  requests[3].first_row = 8;  // row 8: greedy on the device, after host requests
  requests[3].sample = true;
  requests[3].params = &greedy;

  std::vector<LogitsResult> got, want;
  Run(logits, requests, &got, &want);
  EXPECT_EQ(got[0].logits, want[0].logits);
  EXPECT_TRUE(got[0].tokens.empty());
  for (size_t s = 1; s < requests.size(); ++s) {
    SCOPED_TRACE(absl::StrCat("request ", s));
    EXPECT_EQ(got[s].tokens, want[s].tokens);
    EXPECT_EQ(got[s].logprobs, want[s].logprobs);
    EXPECT_TRUE(got[s].logits.empty());
  }
}

}  // namespace
}  // namespace tpserve::cuda
