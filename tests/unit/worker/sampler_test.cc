// Sampler: the penalties against hand-computed values (vLLM semantics), and per-sequence seeding.
#include "worker/sampler.h"

#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

const std::vector<float> kLogits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
const std::vector<int32_t> kPrompt = {0, 1};
const std::vector<int32_t> kOutput = {2, 2, 4};

std::vector<float> Penalized(const SamplerOptions& options, std::vector<int32_t> prompt = kPrompt,
                             std::vector<int32_t> output = kOutput) {
  std::vector<float> logits = kLogits;
  Sampler(options).ApplyPenalties(absl::MakeSpan(logits), prompt, output);
  return logits;
}

void ExpectLogits(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_FLOAT_EQ(actual[i], expected[i]) << "id " << i;
}

TEST(SamplerPenalties, RepetitionDividesPositiveAndMultipliesNegativeForSeenTokens) {
  SamplerOptions options;
  options.repetition_penalty = 2.0f;
  // Seen: 0, 1 (prompt), 2, 4 (output); 3 and 5 untouched.
  ExpectLogits(Penalized(options), {1.0f, -2.0f, 0.25f, 3.0f, -4.0f, 1.0f});
}

TEST(SamplerPenalties, PresenceSubtractsOnceForOutputTokensOnly) {
  SamplerOptions options;
  options.presence_penalty = 1.0f;
  ExpectLogits(Penalized(options), {2.0f, -1.0f, -0.5f, 3.0f, -3.0f, 1.0f});
}

TEST(SamplerPenalties, FrequencySubtractsCountTimesPenalty) {
  SamplerOptions options;
  options.frequency_penalty = 1.0f;
  ExpectLogits(Penalized(options), {2.0f, -1.0f, -1.5f, 3.0f, -3.0f, 1.0f});
}

TEST(SamplerPenalties, AllThreeInVllmOrder) {
  SamplerOptions options;
  options.repetition_penalty = 2.0f;
  options.presence_penalty = 0.5f;
  options.frequency_penalty = 0.25f;
  // id 2: 0.5 / 2 - 2 * 0.25 - 0.5 = -0.75; id 4: -2 * 2 - 0.25 - 0.5 = -4.75.
  ExpectLogits(Penalized(options), {1.0f, -2.0f, -0.75f, 3.0f, -4.75f, 1.0f});
}

TEST(SamplerPenalties, RepeatedPromptTokenIsPenalizedOnceAndOutOfVocabIdsAreIgnored) {
  SamplerOptions options;
  options.repetition_penalty = 2.0f;
  options.frequency_penalty = 1.0f;
  ExpectLogits(Penalized(options, {0, 0, 0, -1, 99}, {7, 3}),
               {1.0f, -1.0f, 0.5f, 0.5f, -2.0f, 1.0f});  // id 3: 3 / 2 - 1
}

TEST(SamplerPenalties, GreedyPicksArgmaxAfterPenaltiesAndLeavesInputUnchanged) {
  SamplerOptions options;  // temperature 0: greedy
  options.presence_penalty = 0.5f;
  const std::vector<float> logits = {3.0f, 2.9f, 0.0f};
  Sampler sampler(options);
  EXPECT_EQ(sampler.Sample(logits, {}, {}), 0);
  EXPECT_EQ(sampler.Sample(logits, {}, std::vector<int32_t>{0}), 1);
  EXPECT_EQ(logits[0], 3.0f);
}

TEST(SamplerPenalties, SameSeedSameDrawsDifferentSeedDifferentDraws) {
  SamplerOptions options;
  options.sampling.temperature = 1.0f;
  options.repetition_penalty = 1.1f;
  const std::vector<float> flat(1000, 0.0f);
  auto draws = [&](uint64_t seed) {
    SamplerOptions seeded = options;
    seeded.seed = seed;
    Sampler sampler(seeded);
    std::vector<int32_t> out;
    for (int i = 0; i < 32; ++i) out.push_back(sampler.Sample(flat, {}, out));
    return out;
  };
  EXPECT_EQ(draws(7), draws(7));
  EXPECT_NE(draws(7), draws(8));
}

TEST(SamplerPenalties, WithoutPenaltiesMatchesCpuSampleOnTheSeededStream) {
  SamplerOptions options;
  options.sampling.temperature = 0.8f;
  options.sampling.top_k = 3;
  options.seed = 42;
  Sampler sampler(options);
  std::vector<int32_t> output;
  for (int i = 0; i < 16; ++i) {
    std::mt19937_64 rng(SampleStreamSeed(42, output.size()));
    const int32_t expected = cpu::Sample(kLogits.data(), kLogits.size(), options.sampling, rng);
    EXPECT_EQ(sampler.Sample(kLogits, kPrompt, output), expected);
    output.push_back(expected);
  }
}

// What makes recompute after preemption invisible: a fresh sampler (the sequence under its new
// worker id) draws output token k exactly as the original one did.
TEST(SamplerPenalties, DrawDependsOnlyOnSeedAndOutputLength) {
  SamplerOptions options;
  options.sampling.temperature = 1.0f;
  options.seed = 9;
  const std::vector<float> flat(1000, 0.0f);
  Sampler original(options);
  std::vector<int32_t> output;
  for (int i = 0; i < 20; ++i) output.push_back(original.Sample(flat, {}, output));
  Sampler recomputed(options);
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(recomputed.Sample(flat, {}, absl::MakeConstSpan(output).first(k)), output[k]);
  }
}

}  // namespace
}  // namespace tpserve
