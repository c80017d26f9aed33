#include "kernels/cpu/silu_mul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tpserve::cpu {
namespace {

TEST(SiluMulTest, HandComputed) {
  // silu(0) = 0, silu(1) = 1 / (1 + e^-1), silu(-1) = -1 / (1 + e), large |g|: g or -0.
  const std::vector<float> gate = {0.0f, 1.0f, -1.0f, 100.0f, -100.0f, -1000.0f};
  const std::vector<float> up = {5.0f, 2.0f, 3.0f, 0.5f, 7.0f, 7.0f};
  std::vector<float> out(gate.size());
  SiluMul(gate.data(), up.data(), gate.size(), out.data());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 2.0 * 0.7310585786300049, 1e-6);
  EXPECT_NEAR(out[2], 3.0 * -0.2689414213699951, 1e-6);
  EXPECT_NEAR(out[3], 50.0f, 1e-5);
  EXPECT_NEAR(out[4], 0.0f, 1e-30);
  EXPECT_EQ(out[5], 0.0f);
  for (float v : out) EXPECT_TRUE(std::isfinite(v));
}

TEST(SiluMulTest, MatchesNaiveAndWorksInPlace) {
  const int64_t n = 10007;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> dist(-12.0f, 12.0f);
  std::vector<float> gate(n), up(n);
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = dist(rng);
    up[i] = dist(rng);
  }
  std::vector<float> out(n);
  SiluMul(gate.data(), up.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double want = g / (1.0 + std::exp(-g)) * up[i];
    ASSERT_NEAR(out[i], want, 2e-6 * std::max(1.0, std::abs(want))) << "index " << i;
  }
  std::vector<float> in_place = gate;
  SiluMul(in_place.data(), up.data(), n, in_place.data());
  EXPECT_EQ(in_place, out);
}

}  // namespace
}  // namespace tpserve::cpu
