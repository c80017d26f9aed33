#include "worker/sampler.h"

#include <algorithm>

namespace tpserve {
namespace {

// SplitMix64's finalizer: neighbouring (seed, index) pairs give unrelated streams.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t SampleStreamSeed(uint64_t seed, size_t output_len) { return Mix(seed ^ Mix(output_len)); }

Sampler::Sampler(const SamplerOptions& options) : options_(options) {}

bool Sampler::HasPenalties() const {
  return options_.repetition_penalty != 1.0f || options_.presence_penalty != 0.0f ||
         options_.frequency_penalty != 0.0f;
}

void Sampler::ApplyPenalties(absl::Span<float> logits, absl::Span<const int32_t> prompt,
                             absl::Span<const int32_t> output) const {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  auto in_vocab = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  // Sorted copies: the distinct seen tokens, and the output tokens with their counts as runs.
  std::vector<int32_t> out_sorted;
  out_sorted.reserve(output.size());
  for (int32_t id : output) {
    if (in_vocab(id)) out_sorted.push_back(id);
  }
  std::sort(out_sorted.begin(), out_sorted.end());
  if (options_.repetition_penalty != 1.0f) {
    std::vector<int32_t> seen = out_sorted;
    for (int32_t id : prompt) {
      if (in_vocab(id)) seen.push_back(id);
    }
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    const float penalty = options_.repetition_penalty;
    for (int32_t id : seen) {
      float& logit = logits[id];
      logit = logit > 0 ? logit / penalty : logit * penalty;
    }
  }
  for (size_t i = 0; i < out_sorted.size();) {
    size_t j = i;
    while (j < out_sorted.size() && out_sorted[j] == out_sorted[i]) ++j;
    logits[out_sorted[i]] -= static_cast<float>(j - i) * options_.frequency_penalty;
    logits[out_sorted[i]] -= options_.presence_penalty;
    i = j;
  }
}

int32_t Sampler::Sample(absl::Span<const float> logits, absl::Span<const int32_t> prompt,
                        absl::Span<const int32_t> output) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  rng_.seed(SampleStreamSeed(options_.seed, output.size()));
  if (!HasPenalties()) return cpu::Sample(logits.data(), vocab, options_.sampling, rng_);
  scratch_.assign(logits.begin(), logits.end());
  ApplyPenalties(absl::MakeSpan(scratch_), prompt, output);
  return cpu::Sample(scratch_.data(), vocab, options_.sampling, rng_);
}

}  // namespace tpserve
