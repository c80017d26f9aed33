// Fuzzes what a worker does with StepRequests before its model runs: StepPlanner's checks and
// plan (the same code ModelRunner::Step runs), then ValidateForwardBatch (which every backend
// runs before touching its KV cache) and, on rank 0, the CPU logits processor over made-up
// logits. The input is a stream of StepRequests, each preceded by its length as a varint (the
// protobuf "delimited" format), so that a sequence can be added, scheduled and drafted over
// several steps. Checked:
//   - rank 0 and rank 1 accept and refuse the same steps (the others would wait in a collective);
//   - a planned batch always passes ValidateForwardBatch, and its logits requests process;
//   - sampled tokens lie in the vocabulary.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fuzz/require.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/delimited_message_util.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/forward_batch.h"
#include "worker/logits_processor.h"
#include "worker/step_planner.h"

namespace tpserve {
namespace {

// A small model and pool, so that fuzzed sizes reach every limit. The vocabulary is not a
// multiple of 32, so bitmasks have a partial last word.
constexpr int64_t kVocab = 300;
constexpr int64_t kContextLength = 256;
constexpr int kMaxSteps = 64;

KvCacheShape Pool() {
  KvCacheShape kv;
  kv.num_layers = 1;
  kv.num_blocks = 32;
  kv.block_size = 16;
  kv.num_kv_heads = 1;
  kv.head_dim = 4;
  return kv;
}

ModelConfig Config() {
  ModelConfig config;
  config.architecture = "llama";
  config.vocab_size = kVocab;
  config.context_length = kContextLength;
  return config;
}

// Rows that depend on the token run there, with ties and a spread of magnitudes.
std::vector<float> MadeUpLogits(const ForwardBatch& batch) {
  std::vector<float> logits(batch.num_logits() * kVocab);
  for (int64_t row = 0; row < batch.num_logits(); ++row) {
    const int32_t token = batch.token_ids[batch.logits_indices[row]];
    for (int64_t v = 0; v < kVocab; ++v) {
      logits[row * kVocab + v] = static_cast<float>((token * 31 + v * 17) % 97) * 0.25f - 8.0f;
    }
  }
  return logits;
}

void RunStep(const v1::StepRequest& request, StepPlanner& rank0, StepPlanner& rank1,
             CpuLogitsProcessor& processor) {
  absl::StatusOr<StepPlanner::Plan> plan0 = rank0.Begin(request);
  absl::StatusOr<StepPlanner::Plan> plan1 = rank1.Begin(request);
  Require(plan0.ok() == plan1.ok(), "every rank accepts or refuses the same step");
  if (!plan0.ok() || request.sequences().empty()) return;
  Require(ValidateForwardBatch(plan0->batch, Config(), Pool()).ok(),
          "a planned batch passes ValidateForwardBatch");
  const std::vector<float> logits = MadeUpLogits(plan0->batch);
  std::vector<LogitsResult> results;
  Require(
      processor.Process(logits.data(), plan0->batch.num_logits(), kVocab, plan0->logits, &results)
          .ok(),
      "checked logits requests process");
  Require(results.size() == plan0->logits.size(), "one result per logits request");
  for (const LogitsResult& result : results) {
    for (int32_t token : result.tokens) Require(token >= 0 && token < kVocab, "tokens in vocab");
    for (float logprob : result.logprobs) Require(!std::isnan(logprob), "logprobs are numbers");
  }
  rank0.Commit(request, *plan0);
  rank1.Commit(request, *plan1);
}

}  // namespace
}  // namespace tpserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpserve;
  StepPlanner rank0(kVocab, kContextLength, Pool(), /*samples=*/true);
  StepPlanner rank1(kVocab, kContextLength, Pool(), /*samples=*/false);
  CpuLogitsProcessor processor;
  google::protobuf::io::ArrayInputStream input(data, static_cast<int>(size));
  for (int step = 0; step < kMaxSteps; ++step) {
    v1::StepRequest request;
    bool clean_eof = false;
    if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&request, &input, &clean_eof)) {
      break;
    }
    RunStep(request, rank0, rank1, processor);
  }
  return 0;
}
