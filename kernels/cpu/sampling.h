// Next-token selection from one row of logits (CPU).
#pragma once

#include <cstdint>
#include <random>

#include "kernels/sampling_params.h"

namespace tpserve::cpu {

// Index of the largest logit; the lowest index on ties. n > 0.
int32_t Argmax(const float* logits, int64_t n);

// Whether Sample picks the argmax without a draw: temperature < 1e-5 (where 1 / temperature
// overflows the exponent) or top_k == 1.
bool IsGreedy(const SamplingParams& params);

// Draws one token id in [0, n) from softmax(logits / temperature), restricted in this order by
// top-k, then top-p (on the renormalized top-k distribution, tokens sorted by descending
// probability, ties by lower id), then min-p; the kept tokens are renormalized and one
// std::uniform_real_distribution<double> draw u from rng picks among them, walked in id order:
// the first kept token whose cumulative weight exceeds u times their total. The result is a
// function of (logits, params, rng state), and of (logits, params, u) alone, which is how the
// CUDA sampler (kernels/cuda/sampling.h, SequenceSampling::uniform) gives the same token. Only
// temperature, top_k, top_p and min_p are read (the penalties are the caller's); they must be
// valid (SamplingParams::Validate). IsGreedy returns Argmax and leaves rng untouched, and so do
// logits whose maximum is not finite (+inf, NaN, all -inf).
//   logits: [n], at least one finite; -inf marks a banned token.
// Cost: one pass over the logits for top-k (a size-k heap), otherwise one exp per token plus,
// for top-p, a sort of only the tokens that can be in the nucleus; with top-k or top-p, a sort
// of the kept tokens by id. Scratch buffers are reused per thread, so steady-state calls do not
// allocate.
int32_t Sample(const float* logits, int64_t n, const SamplingParams& params, std::mt19937_64& rng);

// probs[i] = the probability that Sample draws token i from these logits: softmax(logits /
// temperature) restricted by top-k, top-p and min-p as Sample restricts it, renormalized; a point
// mass on Argmax where Sample is greedy. The target distribution of speculative verification.
// Cost: one exp per token and a sort of the vocabulary (not for every decode step).
void SamplingDistribution(const float* logits, int64_t n, const SamplingParams& params,
                          float* probs);

// A token drawn with probability weights[i] / sum(weights): one uniform draw from rng, walked in
// id order. weights: [n], >= 0, at least one > 0.
int32_t SampleFromWeights(const float* weights, int64_t n, std::mt19937_64& rng);

}  // namespace tpserve::cpu
