// The prompt's own log-probabilities (completions' echo with logprobs, vLLM's prompt_logprobs),
// from the Score path's logits: each prompt token's log-softmax under the logits of the position
// before it, its rank there and the k most likely tokens there.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "coordinator/request_handle.h"

namespace tpserve {

// `logits`: [prompt.size(), vocab], row i predicting token i + 1. The first token, which nothing
// precedes, gets a NaN log-probability and no alternatives.
std::vector<TokenLogprob> PromptLogprobs(absl::Span<const float> logits,
                                         absl::Span<const int32_t> prompt, int64_t vocab,
                                         int32_t top_k);

}  // namespace tpserve
