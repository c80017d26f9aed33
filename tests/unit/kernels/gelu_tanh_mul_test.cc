#include "kernels/cpu/gelu_tanh_mul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/unit/kernels/gated_activation_check.h"

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
  ExpectMatchesFormulaAndWorksInPlace(GeluTanhMul, Reference, 4e-6, 9);
}

}  // namespace
}  // namespace tpserve::cpu
