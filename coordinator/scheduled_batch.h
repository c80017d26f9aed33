// The plan for one step, in coordinator terms (sequence pointers, counts and block ids), and its
// one conversion to the StepRequest every rank receives (STYLE.md: one batch type per layer).
#pragma once

#include <cstdint>
#include <vector>

#include "coordinator/sequence.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

struct ScheduledBatch {
  struct Entry {
    Sequence* seq = nullptr;  // owned by the engine
    bool is_new = false;      // first step of seq->seq_id on the workers: send a NewSequence
    int32_t start = 0;        // position of the first token run; the tokens run are
                              // seq->tokens[start, seq->tokens.size())
    std::vector<int32_t> new_block_ids;  // appended to the sequence's block table
  };
  std::vector<Entry> entries;
  std::vector<uint64_t> finished_seq_ids;  // workers drop these sequences' state

  bool empty() const { return entries.empty(); }
};

// Generate entries sample the next token; Score entries ask for the logits of every position.
v1::StepRequest ToStepRequest(const ScheduledBatch& batch, uint64_t step_id, int64_t deadline_ms);

}  // namespace tpserve
