#include "kernels/cpu/silu_mul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/unit/kernels/gated_activation_check.h"

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
  ExpectMatchesFormulaAndWorksInPlace(
      SiluMul, [](double g) { return g / (1.0 + std::exp(-g)); }, 2e-6, 7);
}

}  // namespace
}  // namespace tpserve::cpu
