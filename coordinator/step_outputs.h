// What rank 0 returns for one step, in coordinator terms: per sequence, the tokens it sampled
// (accepted drafts and one more), their log-probabilities with top alternatives as clients get
// them, a Score step's logits and a draft's proposals. FromStepResponse (step_wire.h) makes it
// from the wire reply once; the scheduler reads only this.
#pragma once

#include <cstdint>
#include <vector>

#include "coordinator/request_handle.h"

namespace tpserve {

struct SequenceStepOutput {
  uint64_t seq_id = 0;
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;  // one per token, with return_logprobs
  std::vector<float> logits;           // [positions, vocab], for a Score entry
  std::vector<int32_t> proposal_token_ids;
};

struct StepOutputs {
  uint64_t step_id = 0;
  std::vector<SequenceStepOutput> sequences;
};

}  // namespace tpserve
