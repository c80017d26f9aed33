// Next-token selection from one row of logits (CPU).
#pragma once

#include <cstdint>
#include <random>

namespace tpserve::cpu {

// Index of the largest logit; the lowest index on ties. n > 0.
int32_t Argmax(const float* logits, int64_t n);

// Per-request sampling settings. The coordinator validates the client's values before they get
// here: temperature >= 0, top_k >= 0, top_p in (0, 1], min_p in [0, 1].
struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (Argmax)
  int32_t top_k = 0;         // keep the k most likely tokens; 0 = off
  float top_p = 1.0f;        // keep the smallest most-likely set with probability >= top_p; 1 = off
  float min_p = 0.0f;        // drop tokens with p < min_p * p_max; 0 = off
};

// Draws one token id in [0, n) from softmax(logits / temperature), restricted in this order by
// top-k, then top-p (on the renormalized top-k distribution, tokens sorted by descending
// probability, ties by lower id), then min-p; the kept tokens are renormalized and one
// std::uniform_real_distribution<double> draw from rng picks among them, so the result is a
// function of (logits, params, rng state). temperature < 1e-5 or top_k == 1 returns Argmax and
// leaves rng untouched, and so do logits whose maximum is not finite (+inf, NaN, all -inf).
//   logits: [n], at least one finite; -inf marks a banned token.
// Cost: one pass over the logits for top-k (a size-k heap), otherwise one exp per token plus,
// for top-p, a sort of only the tokens that can be in the nucleus. Scratch buffers are reused
// per thread, so steady-state calls do not allocate.
int32_t Sample(const float* logits, int64_t n, const SamplingParams& params, std::mt19937_64& rng);

}  // namespace tpserve::cpu
