// What every rank caches about one running sequence between steps (DESIGN.md "Worker protocol"):
// the StepRequest sends full data only when a sequence is new, then diffs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/sampler.h"

namespace tpserve {

struct SequenceState {
  int64_t prompt_len = 0;
  // [known tokens]: the prompt, then every token run past it. Positions >= prompt_len are the
  // output the presence and frequency penalties count.
  std::vector<int32_t> tokens;
  std::vector<int32_t> block_table;  // [blocks] ids in position order, grown by new_block_ids
  // Positions whose KV this rank holds; -1 until first scheduled (a cached prefix may let the
  // first step start past 0).
  int64_t num_computed = -1;
  std::unique_ptr<Sampler> sampler;  // used on rank 0 only, but kept everywhere
  bool return_logprobs = false;
  int32_t top_logprobs = 0;  // in [0, kMaxTopLogprobs]

  absl::Span<const int32_t> prompt() const {
    return absl::MakeConstSpan(tokens).subspan(0, prompt_len);
  }
  absl::Span<const int32_t> output() const {
    return absl::MakeConstSpan(tokens).subspan(prompt_len);
  }
};

inline constexpr int32_t kMaxTopLogprobs = 20;

using SequenceMap = absl::flat_hash_map<uint64_t, SequenceState>;

// Validates a new sequence and builds its state. Proto zeros mean "off": top_p 0 is 1 and
// repetition_penalty 0 is 1. INVALID_ARGUMENT naming the seq id and the field for a temperature
// that is negative or not finite, top_k < 0, top_p or min_p outside [0, 1], a negative
// repetition penalty, a non-finite presence/frequency penalty, or a prompt or output id outside
// [0, vocab_size), or top_logprobs outside [0, kMaxTopLogprobs].
absl::StatusOr<SequenceState> MakeSequenceState(const v1::NewSequence& sequence,
                                                int64_t vocab_size);

}  // namespace tpserve
