// cuda::GatherLogits, cuda::Argmax and cuda::Sample against kernels/cpu/sampling (the
// distribution cpu::Sample draws from is cpu::SamplingDistribution's: ReferenceProbabilities):
//  - the gather copies rows exactly; the argmax equals cpu::Argmax, ties and -inf included;
//  - the greedy cases (temperature 0 or below 1e-5, top_k = 1, an infinite maximum) are the argmax;
//  - over many seeds, token frequencies match the filtered softmax (chi-square), and tokens the
//    filters drop never appear; on a 128k vocabulary every draw lies in the reference's kept set;
//  - the same (seed, draw_index) gives the same token wherever the row sits in the batch.
// Every test needs a device except the Philox known answers and the parameter checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/philox.h"
#include "kernels/cuda/sampling.h"
#include "tests/gpu/gpu_test_util.h"

namespace tpserve::cuda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Settings {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
};

std::string Describe(const Settings& s) {
  return absl::StrCat("temperature ", s.temperature, " top_k ", s.top_k, " top_p ", s.top_p,
                      " min_p ", s.min_p);
}

// cpu::Sample's distribution (cpu::SamplingDistribution, the CPU's own statement of its rules:
// greedy cases, then top-k, top-p and min-p), widened to double for the chi-square sums.
std::vector<double> ReferenceProbabilities(const std::vector<float>& logits, const Settings& s) {
  SamplingParams params;
  params.temperature = s.temperature;
  params.top_k = s.top_k;
  params.top_p = s.top_p;
  params.min_p = s.min_p;
  std::vector<float> probs(logits.size());
  cpu::SamplingDistribution(logits.data(), static_cast<int64_t>(logits.size()), params,
                            probs.data());
  return std::vector<double>(probs.begin(), probs.end());
}

// Wilson–Hilferty's approximation of the chi-square quantile at 1 - 1e-6 (z = 4.753): the tests
// below use fixed seeds, so they are deterministic; the level only says how unlikely a correct
// sampler is to have been caught by the seeds chosen.
double ChiSquareCritical(int df) {
  const double z = 4.753;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

using gpu_test::Download;
using gpu_test::Upload;

SequenceSampling ToSequence(const Settings& s, uint64_t seed, uint64_t draw_index) {
  SequenceSampling q;
  q.temperature = s.temperature;
  q.top_k = s.top_k;
  q.top_p = s.top_p;
  q.min_p = s.min_p;
  q.seed = seed;
  q.draw_index = draw_index;
  return q;
}

class CudaSamplingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TP_SKIP_WITHOUT_CUDA_DEVICES(1);
    absl::StatusOr<CudaStream> stream = CudaStream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = std::make_unique<CudaStream>(*std::move(stream));
  }

  cudaStream_t stream() const { return stream_->get(); }

  // logits: [rows, vocab]; one token per row.
  std::vector<int32_t> RunArgmax(const std::vector<float>& logits, int64_t vocab) {
    const int64_t rows = static_cast<int64_t>(logits.size()) / vocab;
    DeviceBuffer<float> in = Upload(logits, stream());
    DeviceBuffer<int32_t> out = Upload(std::vector<int32_t>(rows, -1), stream());
    const absl::Status status = Argmax({in.data(), out.data(), rows, vocab}, stream());
    EXPECT_TRUE(status.ok()) << status;
    return Download(out, stream());
  }

  std::vector<int32_t> RunSample(const std::vector<float>& logits, int64_t vocab,
                                 const std::vector<SequenceSampling>& sequences) {
    const int64_t rows = static_cast<int64_t>(sequences.size());
    EXPECT_EQ(static_cast<int64_t>(logits.size()), rows * vocab);
    DeviceBuffer<float> in = Upload(logits, stream());
    DeviceBuffer<SequenceSampling> settings = Upload(sequences, stream());
    DeviceBuffer<int32_t> out = Upload(std::vector<int32_t>(rows, -1), stream());
    const absl::Status status =
        Sample({in.data(), settings.data(), out.data(), rows, vocab}, stream());
    EXPECT_TRUE(status.ok()) << status;
    return Download(out, stream());
  }

  // `draws` samples of one row of logits, row r with seed base_seed + r and draw index 7.
  std::vector<int32_t> DrawMany(const std::vector<float>& row, const Settings& s, int64_t draws,
                                uint64_t base_seed) {
    std::vector<float> logits;
    logits.reserve(row.size() * draws);
    std::vector<SequenceSampling> sequences;
    for (int64_t r = 0; r < draws; ++r) {
      logits.insert(logits.end(), row.begin(), row.end());
      sequences.push_back(ToSequence(s, base_seed + r, 7));
    }
    return RunSample(logits, static_cast<int64_t>(row.size()), sequences);
  }

  // Chi-square of the token counts against the reference distribution; any token the reference
  // gives probability 0 is a failure on its own.
  void ExpectDistribution(const std::vector<float>& row, const Settings& s, int64_t draws,
                          uint64_t base_seed) {
    SCOPED_TRACE(Describe(s));
    const std::vector<double> probs = ReferenceProbabilities(row, s);
    const std::vector<int32_t> tokens = DrawMany(row, s, draws, base_seed);
    std::vector<int64_t> counts(row.size(), 0);
    for (const int32_t t : tokens) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, static_cast<int32_t>(row.size()));
      ++counts[t];
    }
    double chi2 = 0.0;
    int categories = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      if (probs[i] == 0.0) {
        EXPECT_EQ(counts[i], 0) << "token " << i << " is filtered out but was drawn";
        continue;
      }
      const double expected = probs[i] * draws;
      chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
      ++categories;
    }
    if (categories > 1) {
      EXPECT_LT(chi2, ChiSquareCritical(categories - 1)) << "over " << categories << " tokens";
    }
  }

  std::unique_ptr<CudaStream> stream_;
};

// Random logits per row, with planted ties at the maximum and banned (-inf) tokens.
std::vector<float> TieAndBanRows(int64_t rows, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(rows * vocab);
  for (float& v : logits) v = normal(rng);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits.data() + r * vocab;
    if (vocab > 4) {
      row[vocab / 3] = 50.0f;  // a maximum, and a later copy of it: the first must win
      row[vocab - 2] = 50.0f;
      row[1] = -kInf;
    }
  }
  return logits;
}

TEST(CudaSamplingPhiloxTest, KnownAnswers) {
  // Random123's kat_vectors for philox4x32_10: counter, key, output.
  struct Case {
    PhiloxBlock counter;
    uint32_t key0, key1;
    PhiloxBlock want;
  };
  const Case cases[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Case& c : cases) {
    const PhiloxBlock got = Philox4x32_10(c.counter, c.key0, c.key1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], c.want.v[i]) << "word " << i;
  }
  // Draw bits: key = seed, counter = draw index, words 0 and 1.
  EXPECT_EQ(SamplingRandomBits(0, 0), (uint64_t{0x6627e8d5} << 32) | 0xe169c58d);
}

TEST(CudaSamplingSupportedTest, RefusesBadParameters) {
  float logits = 0.0f;
  int32_t out = 0;
  SequenceSampling sequence;
  EXPECT_TRUE(SampleSupported({&logits, &sequence, &out, 1, 1}).ok());
  EXPECT_EQ(SampleSupported({&logits, &sequence, &out, 1, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SampleSupported({&logits, nullptr, &out, 1, 1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SampleSupported({&logits, &sequence, &out, -1, 1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ArgmaxSupported({&logits, &out, 1, int64_t{1} << 24}).code(),
            absl::StatusCode::kInvalidArgument);
  int32_t row = 0;
  EXPECT_EQ(GatherLogitsSupported({&logits, LogitsType::kFloat32, &row, &logits, 0, 1, 1}).code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing to do needs no device and no pointers.
  EXPECT_TRUE(Sample({nullptr, nullptr, nullptr, 0, 32000}, nullptr).ok());
}

TEST_F(CudaSamplingTest, GatherCopiesRowsExactly) {
  const int64_t tokens = 5, vocab = 1001;
  const std::vector<int32_t> rows = {4, 0, 4, 2};
  const std::vector<float> logits = TieAndBanRows(tokens, vocab, 1);
  std::vector<float> want;
  for (const int32_t r : rows)
    want.insert(want.end(), logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);

  DeviceBuffer<int32_t> rows_dev = Upload(rows, stream());
  DeviceBuffer<float> out = Upload(std::vector<float>(rows.size() * vocab, 0.0f), stream());
  DeviceBuffer<float> f32 = Upload(logits, stream());
  ASSERT_TRUE(GatherLogits({f32.data(), LogitsType::kFloat32, rows_dev.data(), out.data(), tokens,
                            static_cast<int64_t>(rows.size()), vocab},
                           stream())
                  .ok());
  EXPECT_EQ(Download(out, stream()), want);

  DeviceBuffer<bf16> b16 = Upload(ToBf16(logits), stream());
  ASSERT_TRUE(GatherLogits({b16.data(), LogitsType::kBf16, rows_dev.data(), out.data(), tokens,
                            static_cast<int64_t>(rows.size()), vocab},
                           stream())
                  .ok());
  EXPECT_EQ(Download(out, stream()), ToFloat(ToBf16(want)));
}

TEST_F(CudaSamplingTest, ArgmaxMatchesCpu) {
  for (const int64_t vocab : {1, 7, 1000, 32000, 128256}) {
    SCOPED_TRACE(absl::StrCat("vocab ", vocab));
    std::vector<float> logits = TieAndBanRows(6, vocab, static_cast<uint32_t>(vocab));
    // Row 4: bf16-quantized, so many tokens tie; row 5: every token banned (index 0 wins).
    for (int64_t i = 0; i < vocab; ++i)
      logits[4 * vocab + i] = ToFloat(ToBf16(logits[4 * vocab + i]));
    std::fill(logits.begin() + 5 * vocab, logits.end(), -kInf);
    const std::vector<int32_t> got = RunArgmax(logits, vocab);
    for (int64_t r = 0; r < 6; ++r) {
      EXPECT_EQ(got[r], cpu::Argmax(logits.data() + r * vocab, vocab)) << "row " << r;
    }
  }
}

TEST_F(CudaSamplingTest, GreedyCasesAreTheArgmax) {
  const int64_t vocab = 32000;
  const std::vector<Settings> greedy = {
      {0.0f, 0, 1.0f, 0.0f},   // temperature 0
      {1e-6f, 0, 1.0f, 0.0f},  // below the 1e-5 threshold
      {1.0f, 1, 1.0f, 0.0f},   // top-k = 1
      {0.7f, 1, 0.5f, 0.1f},   // top-k = 1 wins over the other filters
  };
  std::vector<float> logits;
  std::vector<SequenceSampling> sequences;
  for (size_t i = 0; i < greedy.size(); ++i) {
    const std::vector<float> row = TieAndBanRows(1, vocab, 100 + static_cast<uint32_t>(i));
    logits.insert(logits.end(), row.begin(), row.end());
    sequences.push_back(ToSequence(greedy[i], 1234 + i, i));
  }
  // An infinite maximum leaves no distribution: the argmax, at any temperature.
  std::vector<float> row = TieAndBanRows(1, vocab, 200);
  row[777] = kInf;
  logits.insert(logits.end(), row.begin(), row.end());
  sequences.push_back(ToSequence({1.0f, 0, 1.0f, 0.0f}, 5, 0));

  const std::vector<int32_t> got = RunSample(logits, vocab, sequences);
  for (size_t r = 0; r < sequences.size(); ++r) {
    EXPECT_EQ(got[r], cpu::Argmax(logits.data() + r * vocab, vocab)) << "row " << r;
  }
  EXPECT_EQ(got.back(), 777);
}

// Eight tokens, two of them tied (ids 1 and 2) and one banned: every filter, alone and together,
// against the reference distribution, 100,000 seeds each.
TEST_F(CudaSamplingTest, SmallVocabularyDistributionMatchesSoftmax) {
  const std::vector<float> row = {2.0f, 1.5f, 1.5f, 0.3f, -0.7f, -1.0f, -3.0f, -kInf};
  const std::vector<Settings> settings = {
      {1.0f, 0, 1.0f, 0.0f}, {0.5f, 0, 1.0f, 0.0f},  {2.0f, 0, 1.0f, 0.0f},
      {1.0f, 2, 1.0f, 0.0f},  // top-k cuts between the tied tokens: id 1 stays, id 2 goes
      {1.0f, 4, 1.0f, 0.0f}, {1.0f, 0, 0.8f, 0.0f},  {1.0f, 0, 0.3f, 0.0f},
      {1.5f, 0, 1.0f, 0.1f}, {0.8f, 5, 0.9f, 0.05f}, {1.0f, 100, 0.95f, 0.0f},
  };
  uint64_t seed = 1;
  for (const Settings& s : settings) {
    ExpectDistribution(row, s, 100000, seed);
    seed += 1000003;
  }
}

// All tokens tie: top-k and top-p must keep the lowest ids, as the CPU does, which takes the
// radix select down into the id half of its keys.
TEST_F(CudaSamplingTest, TiesKeepLowestIds) {
  ExpectDistribution(std::vector<float>(5000, 0.25f), {1.0f, 3, 1.0f, 0.0f}, 30000, 17);
  ExpectDistribution(std::vector<float>(10, 0.0f), {1.0f, 0, 0.5f, 0.0f}, 30000, 29);
  ExpectDistribution(std::vector<float>(10, 0.0f), {1.0f, 8, 0.5f, 0.0f}, 30000, 31);
}

// A Llama-3-sized vocabulary with bf16-quantized logits (so ties are common): each draw must lie
// in the reference's kept set, and the draws must not all be the same token.
TEST_F(CudaSamplingTest, LargeVocabularyDrawsStayInKeptSet) {
  const int64_t vocab = 128256, rows = 48;
  std::vector<float> logits = TieAndBanRows(rows, vocab, 7);
  for (float& v : logits) v = ToFloat(ToBf16(v));
  const std::vector<Settings> settings = {
      {1.0f, 50, 1.0f, 0.0f},   {1.0f, 0, 0.9f, 0.0f},     {0.8f, 0, 1.0f, 0.05f},
      {1.0f, 40, 0.95f, 0.02f}, {3.0f, 1000, 0.99f, 0.0f}, {1.0f, 0, 1.0f, 0.0f},
  };
  // Remove the planted 50.0 maxima, so that the distributions are not one token.
  for (int64_t r = 0; r < rows; ++r) {
    logits[r * vocab + vocab / 3] = 9.0f;
    logits[r * vocab + vocab - 2] = 9.0f;
  }
  std::vector<SequenceSampling> sequences;
  for (int64_t r = 0; r < rows; ++r) {
    sequences.push_back(ToSequence(settings[r % settings.size()], 1000 + r, r));
  }
  const std::vector<int32_t> got = RunSample(logits, vocab, sequences);
  std::set<int32_t> distinct;
  for (int64_t r = 0; r < rows; ++r) {
    const Settings& s = settings[r % settings.size()];
    const std::vector<float> row(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    const std::vector<double> probs = ReferenceProbabilities(row, s);
    ASSERT_GE(got[r], 0);
    ASSERT_LT(got[r], vocab);
    EXPECT_GT(probs[got[r]], 0.0) << "row " << r << " (" << Describe(s) << ") drew " << got[r];
    distinct.insert(got[r]);
  }
  EXPECT_GT(distinct.size(), 1u);
}

// The draw is a function of (logits, settings, seed, draw_index) alone: the same token again, and
// from another position in another batch.
TEST_F(CudaSamplingTest, SameSeedSameToken) {
  const int64_t vocab = 32000, rows = 64;
  const std::vector<float> logits = TieAndBanRows(rows, vocab, 3);
  std::vector<SequenceSampling> sequences;
  for (int64_t r = 0; r < rows; ++r) {
    sequences.push_back(ToSequence({1.0f, r % 3 == 0 ? 0 : 64, r % 2 == 0 ? 1.0f : 0.9f, 0.0f},
                                   42 + r, static_cast<uint64_t>(r)));
  }
  // Make the rows near-flat, so that different seeds would give different tokens.
  std::vector<float> flat = logits;
  for (float& v : flat) v = std::isfinite(v) ? v / 20.0f : v;
  const std::vector<int32_t> first = RunSample(flat, vocab, sequences);
  EXPECT_EQ(RunSample(flat, vocab, sequences), first);

  // Reversed batch: row r moves to position rows - 1 - r.
  std::vector<float> reversed_logits;
  std::vector<SequenceSampling> reversed_sequences(sequences.rbegin(), sequences.rend());
  for (int64_t r = rows - 1; r >= 0; --r) {
    reversed_logits.insert(reversed_logits.end(), flat.begin() + r * vocab,
                           flat.begin() + (r + 1) * vocab);
  }
  const std::vector<int32_t> reversed = RunSample(reversed_logits, vocab, reversed_sequences);
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(reversed[rows - 1 - r], first[r]) << "row " << r;

  // Successive draws of one request (draw_index 0, 1, 2, ...) on the same logits vary.
  std::vector<float> repeated;
  std::vector<SequenceSampling> steps;
  for (int64_t i = 0; i < 32; ++i) {
    repeated.insert(repeated.end(), flat.begin(), flat.begin() + vocab);
    steps.push_back(ToSequence({1.0f, 0, 1.0f, 0.0f}, 42, static_cast<uint64_t>(i)));
  }
  const std::vector<int32_t> walk = RunSample(repeated, vocab, steps);
  EXPECT_GT(std::set<int32_t>(walk.begin(), walk.end()).size(), 1u);
}

}  // namespace
}  // namespace tpserve::cuda
