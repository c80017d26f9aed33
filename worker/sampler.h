// Per-sequence next-token selection on rank 0: the penalties over the tokens the sequence has seen
// (vLLM semantics), then cpu::Sample with the sequence's own random stream.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "kernels/cpu/sampling.h"

namespace tpserve {

struct SamplerOptions {
  cpu::SamplingParams sampling;
  // Tokens seen in the prompt or the output: positive logits are divided by it, negative ones
  // multiplied. 1 = off; must be > 0.
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;   // subtracted once from every token present in the output
  float frequency_penalty = 0.0f;  // subtracted once per occurrence in the output
  // The draw for output token k comes from a stream seeded by (seed, k), so a sequence that is
  // preempted and recomputed samples exactly what it would have sampled without preemption.
  uint64_t seed = 0;
};

// The seed of the random stream that draws output token `output_len` of a sequence seeded by
// `seed`.
uint64_t SampleStreamSeed(uint64_t seed, size_t output_len);

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);

  // Picks the next token from `logits` ([vocab], left unchanged) after the penalties over
  // `prompt` and `output` (token ids; ids outside [0, vocab) are ignored). Draws from the
  // stream of (seed, output.size()) only when the sampling is not greedy (see cpu::Sample).
  int32_t Sample(absl::Span<const float> logits, absl::Span<const int32_t> prompt,
                 absl::Span<const int32_t> output);

  // Applies the three penalties to `logits` in place, in vLLM's order: repetition, frequency,
  // presence. Exposed for tests.
  void ApplyPenalties(absl::Span<float> logits, absl::Span<const int32_t> prompt,
                      absl::Span<const int32_t> output) const;

  const SamplerOptions& options() const { return options_; }

 private:
  bool HasPenalties() const;

  const SamplerOptions options_;
  std::mt19937_64 rng_;  // reseeded before every draw
  std::vector<float> scratch_;  // [vocab] the penalized copy of the logits
};

}  // namespace tpserve
