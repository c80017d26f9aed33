#include "kernels/cpu/gelu_tanh_mul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tpserve::cpu {
namespace {

// gelu_pytorch_tanh in double, from its formula.
double Reference(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(GeluTanhMulTest, HandComputed) {
  // gelu(0) = 0; gelu(1) = 0.8411919906082768; large |x|: x, or -0.
  const std::vector<float> gate = {0.0f, 1.0f, -1.0f, 20.0f, -20.0f, -1000.0f, 1000.0f};
  const std::vector<float> up = {5.0f, 2.0f, 3.0f, 0.5f, 7.0f, 7.0f, 1.0f};
  std::vector<float> out(gate.size());
  GeluTanhMul(gate.data(), up.data(), gate.size(), out.data());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 2.0 * 0.8411919906082768, 1e-6);
  EXPECT_NEAR(out[2], 3.0 * -0.15880800939172324, 1e-6);
  EXPECT_NEAR(out[3], 10.0f, 1e-5);
  EXPECT_NEAR(out[4], 0.0f, 1e-6);
  EXPECT_EQ(out[5], 0.0f);
  EXPECT_EQ(out[6], 1000.0f);
  for (float v : out) EXPECT_TRUE(std::isfinite(v));
}

// Both the vector and the scalar tail (10007 is not a multiple of 16), and in place.
TEST(GeluTanhMulTest, MatchesTheFormulaAndWorksInPlace) {
  const int64_t n = 10007;
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> dist(-12.0f, 12.0f);
  std::vector<float> gate(n), up(n);
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = dist(rng);
    up[i] = dist(rng);
  }
  std::vector<float> out(n);
  GeluTanhMul(gate.data(), up.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const double want = Reference(gate[i]) * up[i];
    ASSERT_NEAR(out[i], want, 4e-6 * std::max(1.0, std::abs(want))) << "index " << i;
  }
  std::vector<float> in_place = gate;
  GeluTanhMul(in_place.data(), up.data(), n, in_place.data());
  EXPECT_EQ(in_place, out);
}

}  // namespace
}  // namespace tpserve::cpu
