// Device sampling inside the CUDA model's step (CudaForwardPass::ForwardAndProcess) against the
// CPU processor on the same model's logits: two CUDA models load the same weights and run the
// same batches, one through Forward (every row to the host, then CpuLogitsProcessor), the other
// through ForwardAndProcess. Their logits are the same computation, so:
//  - greedy tokens (with a mask, with draft verification) are equal, and Score rows are equal;
//  - seeded tokens are equal but where rounding moves a cut (cuda_logits_processor_test.cc
//    asserts the rate, >= 99%): here at most one of the few draws may differ;
//  - logprobs within kLogprobTolerance (cuda_token_logprobs_test.cc).
// Eagerly with passes of 4 logits rows (sequences straddle them), and through the decode graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <vector>

#include "tests/gpu/gpu_test_model.h"
#include "tests/gpu/gpu_test_util.h"
#include "worker/comm/single_rank_communicator.h"
#include "worker/comm/single_rank_device_communicator.h"
#include "worker/forward_batch.h"
#include "worker/loaded_shard.h"
#include "worker/logits_processor.h"

namespace tpserve {
namespace {

constexpr int64_t kBlockSize = 16;
constexpr float kLogprobTolerance = 1e-5f;

std::unique_ptr<LoadedShard> MakeCudaModel(bool enforce_eager, Communicator* comm,
                                           DeviceCommunicator* device_comm) {
  ModelRunnerOptions options;
  options.model_path = gpu_test::GetTestModel().path;
  options.device = Device::kCuda;
  options.block_size = kBlockSize;
  options.kv_cache_blocks = 64;
  options.cuda.max_num_seqs = 4;  // logits passes of 4 rows
  options.cuda.max_num_batched_tokens = 256;
  options.cuda.enforce_eager = enforce_eager;
  auto model = LoadShard(options, comm, device_comm);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

std::vector<int32_t> Prompt(int length, int salt) {
  std::vector<int32_t> ids(length);
  for (int i = 0; i < length; ++i) ids[i] = 100 + (i * 37 + salt * 101) % 4000;
  return ids;
}

LogitsRequest Sampled(int64_t first_row, int64_t num_rows, const SamplingParams* params) {
  LogitsRequest r;
  r.first_row = first_row;
  r.num_rows = num_rows;
  r.sample = true;
  r.params = params;
  return r;
}

std::vector<int32_t> Table(int first_block, int count) {
  std::vector<int32_t> table(count);
  std::iota(table.begin(), table.end(), first_block);
  return table;
}

class CudaModelSamplingTest : public ::testing::Test {
 protected:
  void SetUp() override { TP_SKIP_WITHOUT_CUDA_DEVICES(1); }

  // The reference model's Forward + CpuLogitsProcessor, and the other's ForwardAndProcess.
  void Step(const ForwardBatch& batch, const std::vector<LogitsRequest>& requests,
            std::vector<LogitsResult>* got, std::vector<LogitsResult>* want) {
    std::vector<float> logits;
    ASSERT_TRUE(reference_->forward_pass().Forward(batch, &logits).ok());
    const int64_t rows = batch.num_logits();
    const int64_t vocab = static_cast<int64_t>(logits.size()) / rows;
    for (const LogitsRequest& r : requests) ASSERT_TRUE(CheckLogitsRequest(r, rows, vocab).ok());
    ASSERT_TRUE(CpuLogitsProcessor().Process(logits.data(), rows, vocab, requests, want).ok());
    const absl::Status status = device_->forward_pass().ForwardAndProcess(batch, requests, got);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(got->size(), requests.size());
  }

  // Tokens equal (seeded ones counted in `seeded_differ` instead), logprobs close, rows equal.
  void Compare(const std::vector<LogitsResult>& got, const std::vector<LogitsResult>& want,
               const std::vector<bool>& seeded) {
    for (size_t s = 0; s < want.size(); ++s) {
      SCOPED_TRACE(testing::Message() << "request " << s);
      EXPECT_EQ(got[s].logits, want[s].logits);
      if (got[s].tokens != want[s].tokens) {
        EXPECT_TRUE(seeded[s]) << "greedy tokens differ";
        ++seeded_differ_;
        continue;
      }
      ASSERT_EQ(got[s].logprobs.size(), want[s].logprobs.size());
      for (size_t i = 0; i < want[s].logprobs.size(); ++i) {
        EXPECT_NEAR(got[s].logprobs[i], want[s].logprobs[i], kLogprobTolerance);
      }
      EXPECT_EQ(got[s].top_token_ids, want[s].top_token_ids);
      for (size_t i = 0; i < want[s].top_logprobs.size(); ++i) {
        EXPECT_NEAR(got[s].top_logprobs[i], want[s].top_logprobs[i], kLogprobTolerance);
      }
    }
  }

  SingleRankCommunicator comm_;
  SingleRankDeviceCommunicator device_comm_;
  std::unique_ptr<LoadedShard> reference_;
  std::unique_ptr<LoadedShard> device_;
  int seeded_differ_ = 0;
};

TEST_F(CudaModelSamplingTest, PrefillStepSamplesAsTheCpuAcrossPasses) {
  reference_ = MakeCudaModel(/*enforce_eager=*/true, &comm_, &device_comm_);
  device_ = MakeCudaModel(/*enforce_eager=*/true, &comm_, &device_comm_);
  ASSERT_NE(reference_, nullptr);
  ASSERT_NE(device_, nullptr);
  const int64_t vocab = reference_->config().vocab_size;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams seeded;
  seeded.temperature = 0.8f;
  seeded.top_p = 0.9f;
  seeded.seed = 4242;
  std::vector<uint32_t> mask(BitmaskWords(vocab), 0x5555'5555u);  // even token ids only

  // Sequence 1 verifies three drafts; the first is the greedy pick of its prompt alone.
  const std::vector<int32_t> prompt1 = Prompt(12, 2);
  ForwardBatchBuilder alone(kBlockSize);
  alone.AddSequence(prompt1, 0, Table(4, 1), /*all_logits=*/false);
  std::vector<float> first_row;
  ASSERT_TRUE(reference_->forward_pass().Forward(alone.Build(), &first_row).ok());
  const std::vector<int32_t> drafts = {
      static_cast<int32_t>(std::max_element(first_row.begin(), first_row.end()) -
                           first_row.begin()),
      7, 8};
  std::vector<int32_t> run1 = prompt1;
  run1.insert(run1.end(), drafts.begin(), drafts.end());

  // Rows: sequence 0 → 0; 1 → 1..4; 2 → 5; 3 (Score) → 6..11: three passes of 4.
  ForwardBatchBuilder builder(kBlockSize);
  builder.AddSequenceWithLogits(Prompt(9, 1), 0, Table(0, 1), 1);
  builder.AddSequenceWithLogits(run1, 0, Table(8, 1), 4);
  builder.AddSequenceWithLogits(Prompt(5, 3), 0, Table(12, 1), 1);
  builder.AddSequenceWithLogits(Prompt(6, 4), 0, Table(16, 1), 6);
  const ForwardBatch batch = builder.Build();
  std::vector<LogitsRequest> requests(4);
  requests[0] = Sampled(0, 1, &greedy);
  requests[0].bitmask = mask;
  requests[0].logprobs = true;
  requests[0].top_logprobs = 5;
  requests[1] = Sampled(1, 4, &greedy);
  requests[1].drafts = drafts;
  requests[1].logprobs = true;
  requests[2] = Sampled(5, 1, &seeded);
  requests[2].output_len = 3;
  requests[2].logprobs = true;
  requests[2].top_logprobs = 2;
  requests[3].first_row = 6;
  requests[3].num_rows = 6;
  requests[3].return_logits = true;

  std::vector<LogitsResult> got, want;
  Step(batch, requests, &got, &want);
  Compare(got, want, {false, false, true, false});
  EXPECT_LE(seeded_differ_, 1);
  EXPECT_EQ(got[0].tokens[0] % 2, 0) << "the mask allows even ids only";
  EXPECT_GE(got[1].tokens.size(), 2u) << "the first draft is the greedy pick";
  EXPECT_EQ(got[3].logits.size(), static_cast<size_t>(6 * vocab));
}

TEST_F(CudaModelSamplingTest, DecodeGraphStepsSampleAsTheCpu) {
  reference_ = MakeCudaModel(/*enforce_eager=*/false, &comm_, &device_comm_);
  device_ = MakeCudaModel(/*enforce_eager=*/false, &comm_, &device_comm_);
  ASSERT_NE(reference_, nullptr);
  ASSERT_NE(device_, nullptr);
  std::vector<SamplingParams> params(3);
  params[0].temperature = 0.0f;
  params[1].seed = 7;
  params[2].temperature = 0.7f;
  params[2].top_k = 50;
  params[2].seed = 8;
  const std::vector<bool> seeded = {false, true, true};
  std::vector<std::vector<int32_t>> tokens;
  ForwardBatchBuilder prefill(kBlockSize);
  for (int s = 0; s < 3; ++s) {
    tokens.push_back(Prompt(5 + 6 * s, s + 5));
    prefill.AddSequence(tokens[s], 0, Table(4 * s, 4), /*all_logits=*/false);
  }
  std::vector<LogitsRequest> requests(3);
  std::vector<int64_t> prompt_len(3);
  for (int s = 0; s < 3; ++s) {
    prompt_len[s] = static_cast<int64_t>(tokens[s].size());
    requests[s] = Sampled(s, 1, &params[s]);
    requests[s].logprobs = s != 1;
    requests[s].top_logprobs = s == 2 ? 20 : 0;
  }
  std::vector<LogitsResult> got, want;
  ForwardBatch batch = prefill.Build();
  const int kSteps = 6;
  for (int step = 0; step <= kSteps; ++step) {
    for (int s = 0; s < 3; ++s) {
      requests[s].output_len = static_cast<int64_t>(tokens[s].size()) - prompt_len[s];
    }
    Step(batch, requests, &got, &want);
    Compare(got, want, seeded);
    ForwardBatchBuilder decode(kBlockSize);
    for (int s = 0; s < 3; ++s) {
      tokens[s].push_back(want[s].tokens[0]);  // both models continue with the CPU's choice
      decode.AddSequence({tokens[s].back()}, static_cast<int32_t>(tokens[s].size() - 1),
                         Table(4 * s, 4), /*all_logits=*/false);
    }
    batch = decode.Build();
  }
  std::printf("seeded decode draws that differ from the CPU's: %d of %d\n", seeded_differ_,
              2 * (kSteps + 1));
  EXPECT_LE(seeded_differ_, 1);
}

}  // namespace
}  // namespace tpserve
