#include "kernels/cpu/rms_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/unit/kernels/random_vector.h"

namespace tpserve::cpu {
namespace {

// The formula, in double: x / sqrt(mean(x^2) + eps) * weight.
std::vector<double> NaiveRmsNorm(const std::vector<float>& x, const std::vector<float>& weight,
                                 int64_t rows, int64_t dim, double eps) {
  std::vector<double> out(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) sum += double{x[r * dim + i]} * x[r * dim + i];
    const double rms = std::sqrt(sum / dim + eps);
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = x[r * dim + i] / rms * weight[i];
  }
  return out;
}

TEST(RmsNormTest, HandComputed) {
  // mean(x^2) = (1 + 4 + 9 + 16) / 4 = 7.5; eps = 0.5 -> rms = sqrt(8) = 2 sqrt(2).
  const std::vector<float> x = {1, -2, 3, 4};
  const std::vector<float> weight = {0.5f, 1, 2, -1};
  std::vector<float> out(4);
  RmsNorm(x.data(), weight.data(), 1, 4, 0.5f, out.data());
  const double rms = std::sqrt(8.0);
  EXPECT_NEAR(out[0], 0.5 / rms, 1e-7);
  EXPECT_NEAR(out[1], -2.0 / rms, 1e-7);
  EXPECT_NEAR(out[2], 6.0 / rms, 1e-7);
  EXPECT_NEAR(out[3], -4.0 / rms, 1e-7);
}

TEST(RmsNormTest, MatchesNaiveOnRandomRows) {
  for (int64_t dim : {1, 7, 64, 576, 4096}) {
    const int64_t rows = 5;
    const std::vector<float> x = RandomVector(rows * dim, 3.0f, dim);
    const std::vector<float> weight = RandomVector(dim, 1.5f, dim + 1);
    std::vector<float> out(rows * dim);
    RmsNorm(x.data(), weight.data(), rows, dim, 1e-5f, out.data());
    const std::vector<double> want = NaiveRmsNorm(x, weight, rows, dim, 1e-5);
    for (int64_t i = 0; i < rows * dim; ++i) {
      ASSERT_NEAR(out[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i])))
          << "dim " << dim << " index " << i;
    }
  }
}

TEST(RmsNormTest, EpsKeepsZeroRowFinite) {
  const std::vector<float> x(8, 0.0f), weight(8, 1.0f);
  std::vector<float> out(8, 1.0f);
  RmsNorm(x.data(), weight.data(), 1, 8, 1e-6f, out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(RmsNormTest, InPlace) {
  const int64_t rows = 3, dim = 16;
  std::vector<float> x = RandomVector(rows * dim, 2.0f, 1);
  const std::vector<float> weight = RandomVector(dim, 1.0f, 2);
  std::vector<float> separate(rows * dim);
  RmsNorm(x.data(), weight.data(), rows, dim, 1e-6f, separate.data());
  RmsNorm(x.data(), weight.data(), rows, dim, 1e-6f, x.data());
  EXPECT_EQ(x, separate);
}

TEST(AddRmsNormTest, AddsIntoResidualThenNormalizes) {
  const int64_t rows = 4, dim = 96;
  const std::vector<float> start = RandomVector(rows * dim, 2.0f, 3);
  const std::vector<float> x = RandomVector(rows * dim, 2.0f, 4);
  const std::vector<float> weight = RandomVector(dim, 1.0f, 5);

  std::vector<float> residual = start;
  std::vector<float> out(rows * dim);
  AddRmsNorm(residual.data(), x.data(), weight.data(), rows, dim, 1e-5f, out.data());

  std::vector<float> sum(rows * dim);
  for (int64_t i = 0; i < rows * dim; ++i) sum[i] = start[i] + x[i];
  EXPECT_EQ(residual, sum);
  std::vector<float> want(rows * dim);
  RmsNorm(sum.data(), weight.data(), rows, dim, 1e-5f, want.data());
  EXPECT_EQ(out, want);

  // out may be x itself (the buffer the layer output arrived in).
  std::vector<float> residual2 = start;
  std::vector<float> x2 = x;
  AddRmsNorm(residual2.data(), x2.data(), weight.data(), rows, dim, 1e-5f, x2.data());
  EXPECT_EQ(residual2, sum);
  EXPECT_EQ(x2, want);
}

}  // namespace
}  // namespace tpserve::cpu
