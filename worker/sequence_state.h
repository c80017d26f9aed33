// What every rank caches about one running sequence between steps (DESIGN.md "Worker protocol"):
// the StepRequest sends full data only when a sequence is new, then diffs.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "kernels/sampling_params.h"

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
  // The last of those positions that hold draft tokens of the previous step: the coordinator says
  // how many it accepted through the next start_position, anywhere in
  // [num_computed - num_unverified, num_computed].
  int64_t num_unverified = 0;
  SamplingParams sampling;  // used on rank 0 only, but kept everywhere
  bool return_logprobs = false;
  int32_t top_logprobs = 0;  // in [0, kMaxTopLogprobs]
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, added to its logit)
  int32_t adapter = 0;                                // LoRA slot; 0: the base model

  absl::Span<const int32_t> prompt() const {
    return absl::MakeConstSpan(tokens).subspan(0, prompt_len);
  }
  absl::Span<const int32_t> output() const {
    return absl::MakeConstSpan(tokens).subspan(prompt_len);
  }
};

using SequenceMap = absl::flat_hash_map<uint64_t, SequenceState>;

}  // namespace tpserve
