#include "kernels/cpu/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace tpserve::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Logits whose softmax at temperature 1 is `probs`.
std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

std::vector<float> RandomLogits(int64_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Fraction of `draws` samples that landed on each token.
std::vector<double> Frequencies(const std::vector<float>& logits, const SamplingParams& params,
                                int draws, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> counts(logits.size());
  for (int i = 0; i < draws; ++i) {
    const int32_t id = Sample(logits.data(), logits.size(), params, rng);
    if (id < 0 || id >= static_cast<int32_t>(logits.size())) {
      ADD_FAILURE() << "id " << id << " out of range";
      continue;
    }
    counts[id] += 1;
  }
  for (double& c : counts) c /= draws;
  return counts;
}

void ExpectFrequencies(const std::vector<double>& got, const std::vector<double>& want,
                       double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (want[i] == 0.0) {
      EXPECT_EQ(got[i], 0.0) << "token " << i << " must never be drawn";
    } else {
      EXPECT_NEAR(got[i], want[i], tolerance) << "token " << i;
    }
  }
}

TEST(ArgmaxTest, LargestLogitAndLowestIndexOnTies) {
  const std::vector<float> logits = {-1, 3, 0.5f, 3, -kInf, 2.9f};
  EXPECT_EQ(Argmax(logits.data(), logits.size()), 1);
  const float one = -5;
  EXPECT_EQ(Argmax(&one, 1), 0);
  const std::vector<float> banned = {-kInf, -kInf, 0.0f};
  EXPECT_EQ(Argmax(banned.data(), banned.size()), 2);
}

TEST(SampleTest, TemperatureZeroIsArgmaxAndLeavesRngAlone) {
  const std::vector<float> logits = RandomLogits(1000, 3.0f, 1);
  const int32_t want = Argmax(logits.data(), logits.size());
  std::mt19937_64 rng(5);
  const std::mt19937_64 before = rng;
  for (const SamplingParams& params : {SamplingParams{0.0f}, SamplingParams{0.0f, 40, 0.5f, 0.1f},
                                       SamplingParams{0.0f, 0, 1, 0}}) {
    EXPECT_EQ(Sample(logits.data(), logits.size(), params, rng), want);
  }
  EXPECT_TRUE(rng == before);
}

TEST(SampleTest, SeededDrawsAreReproducible) {
  const std::vector<float> logits = RandomLogits(1000, 2.0f, 2);
  for (const SamplingParams& params :
       {SamplingParams{1.0f}, SamplingParams{0.8f, 50, 0.9f, 0.01f}, SamplingParams{1.2f, 0, 0.7f},
        SamplingParams{0.7f, 0, 1.0f, 0.05f}}) {
    std::mt19937_64 a(42), b(42), other(43);
    std::vector<int32_t> first, second, third;
    for (int i = 0; i < 200; ++i) {
      first.push_back(Sample(logits.data(), logits.size(), params, a));
      second.push_back(Sample(logits.data(), logits.size(), params, b));
      third.push_back(Sample(logits.data(), logits.size(), params, other));
    }
    EXPECT_EQ(first, second);
    EXPECT_NE(first, third);
  }
}

TEST(SampleTest, TopKOneIsArgmax) {
  std::vector<float> logits = RandomLogits(500, 1.0f, 3);
  logits[17] = logits[400] = 10.0f;  // a tie: the lower index wins
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(Sample(logits.data(), logits.size(), SamplingParams{1.5f, 1}, rng), 17);
  }
}

// Four tokens with probabilities 0.1, 0.2, 0.3, 0.4: 100,000 draws match within 1%.
TEST(SampleTest, FrequenciesMatchTheSoftmax) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  const std::vector<float> logits = LogitsOf(probs);
  ExpectFrequencies(Frequencies(logits, SamplingParams{1.0f}, 100000, 7), probs, 0.01);
  // Temperature 2 flattens to p^(1/2), renormalized.
  std::vector<double> flat;
  for (double p : probs) flat.push_back(std::sqrt(p));
  const double sum = std::accumulate(flat.begin(), flat.end(), 0.0);
  for (double& p : flat) p /= sum;
  ExpectFrequencies(Frequencies(logits, SamplingParams{2.0f}, 100000, 8), flat, 0.01);
}

TEST(SampleTest, TopKKeepsTheKMostLikely) {
  const std::vector<float> logits = LogitsOf({0.1, 0.3, 0.2, 0.4});
  // Top 2 = tokens 3 and 1, renormalized: 0.4 / 0.7 and 0.3 / 0.7.
  ExpectFrequencies(Frequencies(logits, SamplingParams{1.0f, 2}, 100000, 9),
                    {0.0, 3.0 / 7, 0.0, 4.0 / 7}, 0.01);
}

// Probabilities 0.5, 0.3, 0.15, 0.05: the smallest set reaching 0.75 is {0, 1}.
TEST(SampleTest, TopPExcludesTheTail) {
  const std::vector<float> logits = LogitsOf({0.5, 0.3, 0.15, 0.05});
  ExpectFrequencies(Frequencies(logits, SamplingParams{1.0f, 0, 0.75f}, 10000, 10),
                    {0.625, 0.375, 0.0, 0.0}, 0.02);
  ExpectFrequencies(Frequencies(logits, SamplingParams{1.0f, 0, 0.9f}, 10000, 11),
                    {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0}, 0.02);
  ExpectFrequencies(Frequencies(logits, SamplingParams{1.0f, 0, 0.3f}, 10000, 12),
                    {1.0, 0.0, 0.0, 0.0}, 0.0);
}

// top-p sees the renormalized top-k distribution: top-2 of (0.4, 0.3, 0.2, 0.1) is
// (0.571, 0.429), and 0.571 alone reaches top_p 0.5. (Top-p on the full distribution would keep
// {0, 1}.)
TEST(SampleTest, TopPAppliesAfterTopK) {
  const std::vector<float> logits = LogitsOf({0.4, 0.3, 0.2, 0.1});
  ExpectFrequencies(Frequencies(logits, SamplingParams{1.0f, 2, 0.5f}, 10000, 13),
                    {1.0, 0.0, 0.0, 0.0}, 0.0);
}

// A wide distribution: one token at logit 6 over 4000 at N(0, 1). The nucleus reaches far below
// 1/64 of the top token's probability, so the candidate threshold must be lowered again, and
// holds hundreds of tokens. Every draw lies in the nucleus computed by a full sort.
TEST(SampleTest, TopPOnAWideDistributionDrawsOnlyFromTheNucleus) {
  const int64_t vocab = 4000;
  std::vector<float> logits = RandomLogits(vocab, 1.0f, 14);
  logits[123] = 6.0f;
  const float top_p = 0.6f;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  double total = 0;
  for (float l : logits) total += std::exp(double{l});
  std::set<int32_t> nucleus;
  double cumulative = 0;
  for (int32_t id : order) {
    nucleus.insert(id);
    cumulative += std::exp(double{logits[id]}) / total;
    if (cumulative >= top_p) break;
  }
  ASSERT_GT(nucleus.size(), 200u);
  ASSERT_LT(std::exp(double{logits[order[nucleus.size() - 1]]} - 6.0), 1.0 / 64);
  std::mt19937_64 rng(15);
  std::set<int32_t> drawn;
  for (int i = 0; i < 4000; ++i) {
    const int32_t id = Sample(logits.data(), vocab, SamplingParams{1.0f, 0, top_p}, rng);
    ASSERT_TRUE(nucleus.count(id)) << "token " << id << " is outside the nucleus";
    drawn.insert(id);
  }
  EXPECT_TRUE(drawn.count(123));
  EXPECT_GT(drawn.size(), nucleus.size() / 4);
}

// min_p 0.2 with p_max 0.5 drops tokens below 0.1.
TEST(SampleTest, MinPDropsTokensBelowAFractionOfTheMostLikely) {
  const std::vector<float> logits = LogitsOf({0.05, 0.5, 0.15, 0.3});
  ExpectFrequencies(Frequencies(logits, SamplingParams{1.0f, 0, 1.0f, 0.2f}, 100000, 16),
                    {0.0, 0.5 / 0.95, 0.15 / 0.95, 0.3 / 0.95}, 0.01);
  // The same cut after top-k (the ratio to p_max does not change under renormalization).
  ExpectFrequencies(Frequencies(logits, SamplingParams{1.0f, 3, 1.0f, 0.2f}, 100000, 17),
                    {0.0, 0.5 / 0.95, 0.15 / 0.95, 0.3 / 0.95}, 0.01);
}

// Both keep a prefix of the sorted order, so together they keep the shorter one.
TEST(SampleTest, TopPAndMinPKeepTheShorterPrefix) {
  const std::vector<float> logits = LogitsOf({0.05, 0.5, 0.15, 0.3});
  // top_p 0.99 alone keeps all four; min_p 0.2 (p >= 0.1) keeps three.
  ExpectFrequencies(Frequencies(logits, SamplingParams{1.0f, 0, 0.99f, 0.2f}, 100000, 19),
                    {0.0, 0.5 / 0.95, 0.15 / 0.95, 0.3 / 0.95}, 0.01);
  // top_p 0.7 keeps {1, 3}; min_p 0.2 would keep three.
  ExpectFrequencies(Frequencies(logits, SamplingParams{1.0f, 0, 0.7f, 0.2f}, 100000, 20),
                    {0.0, 0.5 / 0.8, 0.0, 0.3 / 0.8}, 0.01);
}

// SamplingDistribution is the distribution Sample draws from, filters included: the target of
// speculative verification must be exactly what plain sampling would have drawn.
TEST(SamplingDistributionTest, MatchesSampleFrequenciesUnderEveryFilter) {
  const std::vector<float> logits = RandomLogits(24, 2.0f, 21);
  for (const SamplingParams& params :
       {SamplingParams{1.0f}, SamplingParams{0.7f, 5}, SamplingParams{1.3f, 0, 0.8f},
        SamplingParams{1.0f, 0, 1.0f, 0.3f}, SamplingParams{0.9f, 8, 0.9f, 0.05f},
        SamplingParams{0.0f}}) {
    std::vector<float> probs(logits.size());
    SamplingDistribution(logits.data(), logits.size(), params, probs.data());
    const std::vector<double> want(probs.begin(), probs.end());
    ExpectFrequencies(Frequencies(logits, params, 100000, 22), want, 0.01);
  }
}

TEST(SampleTest, BannedTokensAreNeverDrawn) {
  const std::vector<float> logits = {-kInf, 0.0f, -kInf, 1.0f, -kInf};
  for (const SamplingParams& params :
       {SamplingParams{1.0f}, SamplingParams{1.0f, 4}, SamplingParams{1.0f, 0, 0.99f}}) {
    const std::vector<double> freq = Frequencies(logits, params, 5000, 18);
    EXPECT_EQ(freq[0] + freq[2] + freq[4], 0.0);
    EXPECT_GT(freq[1], 0.0);
  }
}

}  // namespace
}  // namespace tpserve::cpu

namespace tpserve::cpu {
namespace {

// Client-chosen parameters (a tiny temperature, penalties that overflow a logit) must never
// crash a worker: the draw falls back to the argmax.
TEST(SampleTest, DegenerateInputsFallBackToArgmax) {
  std::mt19937_64 rng(5);
  const std::vector<float> logits = {0.5f, 2.0f, 1.0f, -1.0f};
  SamplingParams tiny;
  tiny.temperature = 1e-30f;
  tiny.top_p = 0.5f;
  tiny.min_p = 0.5f;
  EXPECT_EQ(Sample(logits.data(), 4, tiny, rng), 1);

  const std::vector<float> overflowed = {0.5f, std::numeric_limits<float>::infinity(), 1.0f};
  SamplingParams warm;
  warm.temperature = 1.0f;
  EXPECT_EQ(Sample(overflowed.data(), 3, warm, rng), 1);
  warm.top_k = 2;
  EXPECT_EQ(Sample(overflowed.data(), 3, warm, rng), 1);

  const std::vector<float> banned(3, -std::numeric_limits<float>::infinity());
  warm.top_k = 0;
  const int32_t id = Sample(banned.data(), 3, warm, rng);
  EXPECT_GE(id, 0);
  EXPECT_LT(id, 3);
}

}  // namespace
}  // namespace tpserve::cpu
