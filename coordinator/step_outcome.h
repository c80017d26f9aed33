// What one step did to the requests, as Scheduler::Postprocess hands it to the engine to stream
// (STYLE.md: the scheduler decides, the engine only tells the clients).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/request_handle.h"
#include "coordinator/sequence.h"

namespace tpserve {

struct SequenceUpdate {
  struct Token {
    int32_t id = 0;
    std::string text;  // released with this token (stop strings hold text back)
    std::optional<TokenLogprob> logprob;
  };
  Sequence* seq = nullptr;    // the scheduler's, or `finished` when it left this step
  std::vector<Token> tokens;  // streamed in order; a final stop token is not among them
  int32_t num_sampled = 0;    // tokens this step added to the sequence, stop token included
  std::string tail;           // text released after the last token, at the end of generation
  // Set when the sequence left the scheduler this step: finished (seq->finish_reason), scored
  // (seq->score_logits complete) or failed (`error`).
  std::unique_ptr<Sequence> finished;
  absl::Status error;  // rank 0's reply for this sequence was unusable
};

}  // namespace tpserve
