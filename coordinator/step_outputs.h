// What rank 0 returns for one step, in coordinator terms: per sequence, the tokens it sampled
// (accepted drafts and one more), their log-probabilities and top alternatives, a Score step's
// logits and a draft's proposals. FromStepResponse (step_wire.h) makes it from the wire reply
// once; the scheduler reads only this.
#pragma once

#include <cstdint>
#include <vector>

namespace tpserve {

struct SequenceStepOutput {
  uint64_t seq_id = 0;
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;          // one per token, with return_logprobs
  std::vector<int32_t> top_token_ids;   // [tokens, top_logprobs]
  std::vector<float> top_logprobs;      // [tokens, top_logprobs]
  std::vector<float> logits;            // [positions, vocab], for a Score entry
  std::vector<int32_t> proposal_token_ids;
};

struct StepOutputs {
  uint64_t step_id = 0;
  std::vector<SequenceStepOutput> sequences;
};

}  // namespace tpserve
