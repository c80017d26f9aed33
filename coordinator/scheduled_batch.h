// The plan for one step, in coordinator terms (sequence pointers, counts and block ids); its one
// conversion to the StepRequest every rank receives is in step_wire.h.
#pragma once

#include <cstdint>
#include <vector>

#include "coordinator/sequence.h"

namespace tpserve {

struct ScheduledBatch {
  struct Entry {
    Sequence* seq = nullptr;  // owned by the scheduler
    bool is_new = false;      // first step of seq->seq_id on the workers: send a NewSequence
    int32_t start = 0;        // position of the first token run (seq->num_computed)
    int32_t num_tokens = 0;   // runs seq->tokens[start, start + num_tokens)
    std::vector<int32_t> new_block_ids;  // appended to the sequence's block table
    // Speculative decoding: tokens proposed after the last one, run at the next positions and
    // verified by rank 0 (the block table covers them).
    std::vector<int32_t> drafts;
    // Draft model: proposals rank 0 makes after this step (the block table covers the positions
    // its draft writes).
    int32_t num_proposals = 0;
    // -1, or how many of the sequence's block table entries the workers keep before appending
    // new_block_ids (Sequence::kept_blocks).
    int32_t kept_blocks = -1;

    // This step reaches the end of the known tokens: a Generate entry samples the next one.
    bool completes() const {
      return start + num_tokens == static_cast<int32_t>(seq->tokens.size());
    }
  };
  std::vector<Entry> entries;
  std::vector<uint64_t> finished_seq_ids;  // workers drop these sequences' state

  bool empty() const { return entries.empty(); }
  int32_t num_tokens() const {
    int32_t n = 0;
    for (const Entry& e : entries) n += e.num_tokens + static_cast<int32_t>(e.drafts.size());
    return n;
  }
};

}  // namespace tpserve
