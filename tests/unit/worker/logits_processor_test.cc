// The logits-processor seam on the CPU: penalties against hand-computed values (vLLM semantics),
// per-sequence seeding, allow-list masks, and draft verification — greedy acceptance counted
// exactly, rejection sampling checked against the target distribution (softmax on paper) with a
// chi-square test.
#include "worker/logits_processor.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/sampling.h"

namespace tpserve {
namespace {

const std::vector<float> kLogits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
const std::vector<int32_t> kPrompt = {0, 1};
const std::vector<int32_t> kOutput = {2, 2, 4};

std::vector<float> Penalized(const SamplingParams& options, std::vector<int32_t> prompt = kPrompt,
                             std::vector<int32_t> output = kOutput) {
  std::vector<float> logits = kLogits;
  ApplyPenalties(options, prompt, output, absl::MakeSpan(logits));
  return logits;
}

// Runs `request` over `rows` ([num_rows, vocab]) through the CPU processor.
LogitsResult Process(const std::vector<float>& rows, int64_t vocab, LogitsRequest request) {
  const int64_t num_rows = static_cast<int64_t>(rows.size()) / vocab;
  EXPECT_TRUE(CheckLogitsRequest(request, num_rows, vocab).ok())
      << CheckLogitsRequest(request, num_rows, vocab);
  CpuLogitsProcessor processor;
  std::vector<LogitsResult> results;
  EXPECT_TRUE(processor.Process(rows.data(), num_rows, vocab, {request}, &results).ok());
  return results.at(0);
}

// One token sampled from one row after `prompt` and `output`.
int32_t SampleOne(const SamplingParams& params, const std::vector<float>& row,
                  absl::Span<const int32_t> prompt, absl::Span<const int32_t> output) {
  LogitsRequest request;
  request.sample = true;
  request.params = &params;
  request.prompt = prompt;
  request.output = output;
  request.output_len = static_cast<int64_t>(output.size());
  return Process(row, static_cast<int64_t>(row.size()), request).tokens.at(0);
}

void ExpectLogits(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_FLOAT_EQ(actual[i], expected[i]) << "id " << i;
}

TEST(LogitsProcessorPenalties, RepetitionDividesPositiveAndMultipliesNegativeForSeenTokens) {
  SamplingParams options;
  options.repetition_penalty = 2.0f;
  // Seen: 0, 1 (prompt), 2, 4 (output); 3 and 5 untouched.
  ExpectLogits(Penalized(options), {1.0f, -2.0f, 0.25f, 3.0f, -4.0f, 1.0f});
}

TEST(LogitsProcessorPenalties, PresenceSubtractsOnceForOutputTokensOnly) {
  SamplingParams options;
  options.presence_penalty = 1.0f;
  ExpectLogits(Penalized(options), {2.0f, -1.0f, -0.5f, 3.0f, -3.0f, 1.0f});
}

TEST(LogitsProcessorPenalties, FrequencySubtractsCountTimesPenalty) {
  SamplingParams options;
  options.frequency_penalty = 1.0f;
  ExpectLogits(Penalized(options), {2.0f, -1.0f, -1.5f, 3.0f, -3.0f, 1.0f});
}

TEST(LogitsProcessorPenalties, AllThreeInVllmOrder) {
  SamplingParams options;
  options.repetition_penalty = 2.0f;
  options.presence_penalty = 0.5f;
  options.frequency_penalty = 0.25f;
  // id 2: 0.5 / 2 - 2 * 0.25 - 0.5 = -0.75; id 4: -2 * 2 - 0.25 - 0.5 = -4.75.
  ExpectLogits(Penalized(options), {1.0f, -2.0f, -0.75f, 3.0f, -4.75f, 1.0f});
}

TEST(LogitsProcessorPenalties, RepeatedPromptTokenIsPenalizedOnceAndOutOfVocabIdsAreIgnored) {
  SamplingParams options;
  options.repetition_penalty = 2.0f;
  options.frequency_penalty = 1.0f;
  ExpectLogits(Penalized(options, {0, 0, 0, -1, 99}, {7, 3}),
               {1.0f, -1.0f, 0.5f, 0.5f, -2.0f, 1.0f});  // id 3: 3 / 2 - 1
}

TEST(LogitsProcessorPenalties, GreedyPicksArgmaxAfterPenaltiesAndLeavesInputUnchanged) {
  SamplingParams options;
  options.temperature = 0;  // greedy
  options.presence_penalty = 0.5f;
  const std::vector<float> logits = {3.0f, 2.9f, 0.0f};
  EXPECT_EQ(SampleOne(options, logits, {}, {}), 0);
  EXPECT_EQ(SampleOne(options, logits, {}, std::vector<int32_t>{0}), 1);
  EXPECT_EQ(logits[0], 3.0f);
}

TEST(LogitsProcessorPenalties, SameSeedSameDrawsDifferentSeedDifferentDraws) {
  SamplingParams options;
  options.temperature = 1.0f;
  options.repetition_penalty = 1.1f;
  const std::vector<float> flat(1000, 0.0f);
  auto draws = [&](uint64_t seed) {
    SamplingParams seeded = options;
    seeded.seed = seed;
    std::vector<int32_t> out;
    for (int i = 0; i < 32; ++i) out.push_back(SampleOne(seeded, flat, {}, out));
    return out;
  };
  EXPECT_EQ(draws(7), draws(7));
  EXPECT_NE(draws(7), draws(8));
}

TEST(LogitsProcessorPenalties, WithoutPenaltiesMatchesCpuSampleOnTheSeededStream) {
  SamplingParams options;
  options.temperature = 0.8f;
  options.top_k = 3;
  options.seed = 42;
  std::vector<int32_t> output;
  for (int i = 0; i < 16; ++i) {
    std::mt19937_64 rng(SampleStreamSeed(42, output.size()));
    const int32_t expected = cpu::Sample(kLogits.data(), kLogits.size(), options, rng);
    EXPECT_EQ(SampleOne(options, kLogits, kPrompt, output), expected);
    output.push_back(expected);
  }
}

// What makes recompute after preemption invisible: the sequence under its new worker id draws
// output token k exactly as the original one did.
TEST(LogitsProcessorPenalties, DrawDependsOnlyOnSeedAndOutputLength) {
  SamplingParams options;
  options.temperature = 1.0f;
  options.seed = 9;
  const std::vector<float> flat(1000, 0.0f);
  std::vector<int32_t> output;
  for (int i = 0; i < 20; ++i) output.push_back(SampleOne(options, flat, {}, output));
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(SampleOne(options, flat, {}, absl::MakeConstSpan(output).first(k)), output[k]);
  }
}

// ---- The seam: masks and drafts ---------------------------------------------------------------

std::vector<uint32_t> AllowOnly(int64_t vocab, std::vector<int32_t> tokens) {
  std::vector<uint32_t> mask(BitmaskWords(vocab), 0);
  for (int32_t t : tokens) mask[t / 32] |= 1u << (t % 32);
  return mask;
}

// Random logits [rows, vocab], spread enough that no token dominates.
std::vector<float> RandomRows(int64_t rows, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> out(rows * vocab);
  for (float& x : out) x = normal(rng);
  return out;
}

// softmax(row / temperature), computed here from the formula, not by the code under test.
std::vector<double> Softmax(const float* row, int64_t vocab, double temperature) {
  double max = row[0];
  for (int64_t i = 1; i < vocab; ++i) max = std::max<double>(max, row[i]);
  std::vector<double> p(vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += p[i] = std::exp((row[i] - max) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

// Pearson's statistic of `counts` against `probs` and the 1% critical value for its degrees of
// freedom (Wilson–Hilferty: chi2_{0.99}(k) ≈ k (1 - 2/(9k) + 2.3263 sqrt(2/(9k)))^3).
void ExpectChiSquare(const std::vector<int64_t>& counts, const std::vector<double>& probs,
                     const std::string& what) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  double statistic = 0;
  int df = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0) {
      EXPECT_EQ(counts[i], 0) << what << ": token " << i << " has probability 0";
      continue;
    }
    const double expected = probs[i] * n;
    statistic += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++df;
  }
  ASSERT_GT(df, 0);
  const double k = df;
  const double critical = k * std::pow(1 - 2 / (9 * k) + 2.3263 * std::sqrt(2 / (9 * k)), 3);
  EXPECT_LT(statistic, critical) << what << ": chi-square " << statistic << " with " << df
                                 << " degrees of freedom over " << n << " draws (p < 0.01)";
}

TEST(LogitsProcessorMask, OneAllowedTokenIsForcedAtAnyTemperature) {
  constexpr int64_t kVocab = 100;  // four words, the last partly past the vocabulary
  const std::vector<float> row = RandomRows(1, kVocab, 3);
  const std::vector<uint32_t> mask = AllowOnly(kVocab, {77});
  for (float temperature : {0.0f, 0.5f, 1.0f, 5.0f, 100.0f}) {
    for (uint64_t seed = 0; seed < 50; ++seed) {
      SamplingParams params;
      params.temperature = temperature;
      params.seed = seed;
      LogitsRequest request;
      request.sample = true;
      request.params = &params;
      request.bitmask = mask;
      ASSERT_EQ(Process(row, kVocab, request).tokens, std::vector<int32_t>{77})
          << "temperature " << temperature << " seed " << seed;
    }
  }
}

TEST(LogitsProcessorMask, DrawsOnlyAllowedTokensInProportion) {
  constexpr int64_t kVocab = 40;
  const std::vector<float> row = RandomRows(1, kVocab, 4);
  const std::vector<int32_t> allowed = {1, 5, 33, 39};
  const std::vector<uint32_t> mask = AllowOnly(kVocab, allowed);
  std::vector<double> want(kVocab, 0);
  double sum = 0;
  for (int32_t t : allowed) sum += want[t] = std::exp(row[t]);
  for (double& p : want) p /= sum;
  std::vector<int64_t> counts(kVocab, 0);
  SamplingParams params;
  for (uint64_t seed = 0; seed < 20000; ++seed) {
    params.seed = seed;
    LogitsRequest request;
    request.sample = true;
    request.params = &params;
    request.bitmask = mask;
    ++counts[Process(row, kVocab, request).tokens.at(0)];
  }
  ExpectChiSquare(counts, want, "masked sampling");
}

TEST(LogitsProcessorMask, RefusesMasksThatAllowNothingOrHaveTheWrongLength) {
  constexpr int64_t kVocab = 40;
  SamplingParams params;
  LogitsRequest request;
  request.sample = true;
  request.params = &params;
  std::vector<uint32_t> nothing(BitmaskWords(kVocab), 0);
  nothing[1] = 1u << 31;  // token 63: past the vocabulary
  request.bitmask = nothing;
  EXPECT_EQ(CheckLogitsRequest(request, 1, kVocab).message(),
            "token_bitmask row 0 allows no token of the vocabulary");
  const std::vector<uint32_t> short_mask(1, ~0u);
  request.bitmask = short_mask;
  EXPECT_EQ(CheckLogitsRequest(request, 1, kVocab).message(),
            "token_bitmask has 1 words; 1 rows of a vocabulary of 40 need 2");
}

// Greedy verification: drafts equal to each row's argmax are accepted up to the first that is
// not, whose row's argmax is the correction; all accepted gives K + 1 tokens.
TEST(LogitsProcessorDrafts, GreedyAcceptsExactlyThePrefixThatMatchesTheArgmax) {
  constexpr int64_t kVocab = 64;
  constexpr int64_t kDrafts = 5;
  const std::vector<float> rows = RandomRows(kDrafts + 1, kVocab, 5);
  std::vector<int32_t> argmax;
  for (int64_t k = 0; k <= kDrafts; ++k) argmax.push_back(cpu::Argmax(&rows[k * kVocab], kVocab));
  SamplingParams greedy;
  greedy.temperature = 0;
  for (int64_t wrong_at = 0; wrong_at <= kDrafts; ++wrong_at) {
    std::vector<int32_t> drafts(argmax.begin(), argmax.begin() + kDrafts);
    if (wrong_at < kDrafts) drafts[wrong_at] = (argmax[wrong_at] + 1) % kVocab;
    LogitsRequest request;
    request.sample = true;
    request.params = &greedy;
    request.num_rows = kDrafts + 1;
    request.drafts = drafts;
    request.logprobs = true;
    const LogitsResult result = Process(rows, kVocab, request);
    // wrong_at drafts accepted, then the argmax of row wrong_at (the bonus when all matched).
    const std::vector<int32_t> want(argmax.begin(), argmax.begin() + wrong_at + 1);
    EXPECT_EQ(result.tokens, want) << "first wrong draft at " << wrong_at;
    EXPECT_EQ(result.logprobs.size(), want.size());
  }
}

TEST(LogitsProcessorDrafts, GreedyVerificationSeesTheMaskOfEachRow) {
  constexpr int64_t kVocab = 64;
  const std::vector<float> rows = RandomRows(3, kVocab, 6);
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<uint32_t> masks;
  for (int32_t t : {10, 20, 30}) {
    const std::vector<uint32_t> row = AllowOnly(kVocab, {t});
    masks.insert(masks.end(), row.begin(), row.end());
  }
  const std::vector<int32_t> drafts = {10, 21};
  LogitsRequest request;
  request.sample = true;
  request.params = &greedy;
  request.num_rows = 3;
  request.drafts = drafts;
  request.bitmask = masks;
  EXPECT_EQ(Process(rows, kVocab, request).tokens, (std::vector<int32_t>{10, 20}));
}

// Rejection sampling keeps the target distribution: the first token is distributed as p_0 whatever
// the drafts, and the second, when the first draft was accepted, as p_1.
void ExpectTargetDistribution(bool with_draft_probs) {
  constexpr int64_t kVocab = 12;
  constexpr int64_t kDrafts = 2;
  constexpr int kTrials = 20000;
  constexpr float kTemperature = 0.9f;
  const std::vector<float> rows = RandomRows(kDrafts + 1, kVocab, 7);
  const std::vector<double> p0 = Softmax(&rows[0], kVocab, kTemperature);
  const std::vector<double> p1 = Softmax(&rows[kVocab], kVocab, kTemperature);
  // The draft model: a different distribution over the same vocabulary.
  const std::vector<float> q_logits = RandomRows(kDrafts, kVocab, 8);
  std::vector<float> q;
  for (int64_t k = 0; k < kDrafts; ++k) {
    for (double x : Softmax(&q_logits[k * kVocab], kVocab, 1.0)) q.push_back(static_cast<float>(x));
  }
  std::mt19937_64 proposals(9);
  std::vector<int64_t> first(kVocab, 0), second(kVocab, 0);
  SamplingParams params;
  params.temperature = kTemperature;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<int32_t> drafts;
    for (int64_t k = 0; k < kDrafts; ++k) {
      if (with_draft_probs) {
        std::discrete_distribution<int32_t> draw(q.begin() + k * kVocab,
                                                 q.begin() + (k + 1) * kVocab);
        drafts.push_back(draw(proposals));
      } else {
        drafts.push_back(static_cast<int32_t>(k + 3));  // a fixed n-gram guess
      }
    }
    params.seed = trial;
    LogitsRequest request;
    request.sample = true;
    request.params = &params;
    request.num_rows = kDrafts + 1;
    request.drafts = drafts;
    if (with_draft_probs) request.draft_probs = q;
    const LogitsResult result = Process(rows, kVocab, request);
    ASSERT_GE(result.tokens.size(), 1u);
    ASSERT_LE(result.tokens.size(), static_cast<size_t>(kDrafts + 1));
    ++first[result.tokens[0]];
    if (result.tokens.size() >= 2) ++second[result.tokens[1]];
  }
  const std::string kind = with_draft_probs ? "probability drafts" : "point-mass drafts";
  ExpectChiSquare(first, p0, kind + ", first token");
  ExpectChiSquare(second, p1, kind + ", second token after an accepted first");
}

TEST(LogitsProcessorDrafts, PointMassDraftsKeepTheTargetDistribution) {
  ExpectTargetDistribution(false);
}

TEST(LogitsProcessorDrafts, ProbabilityDraftsKeepTheTargetDistribution) {
  ExpectTargetDistribution(true);
}

TEST(LogitsProcessorDrafts, SeededVerificationIsReproducible) {
  constexpr int64_t kVocab = 32;
  const std::vector<float> rows = RandomRows(4, kVocab, 10);
  const std::vector<int32_t> drafts = {1, 2, 3};
  SamplingParams params;
  params.seed = 1234;
  LogitsRequest request;
  request.sample = true;
  request.params = &params;
  request.num_rows = 4;
  request.drafts = drafts;
  EXPECT_EQ(Process(rows, kVocab, request).tokens, Process(rows, kVocab, request).tokens);
}

TEST(LogitsProcessorDrafts, RefusesDraftsThatDoNotFitTheRows) {
  constexpr int64_t kVocab = 16;
  SamplingParams params;
  const std::vector<int32_t> drafts = {1, 99};
  LogitsRequest request;
  request.sample = true;
  request.params = &params;
  request.num_rows = 2;
  request.drafts = drafts;
  EXPECT_EQ(CheckLogitsRequest(request, 2, kVocab).message(),
            "2 draft tokens need 3 logits rows; the sequence has 2");
  request.num_rows = 3;
  EXPECT_EQ(CheckLogitsRequest(request, 3, kVocab).message(),
            "draft_token_ids[1] = 99 is outside the vocabulary of 16");
  const std::vector<int32_t> good = {1, 2};
  request.drafts = good;
  const std::vector<float> not_a_distribution(2 * kVocab, 0.5f);
  request.draft_probs = not_a_distribution;
  EXPECT_EQ(CheckLogitsRequest(request, 3, kVocab).message(),
            "draft_probs row 0 is not a distribution that could have proposed draft 1 (values "
            ">= 0 summing to 1, the draft's > 0)");
}

}  // namespace
}  // namespace tpserve
