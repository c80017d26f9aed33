#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tests/unit/kernels/random_vector.h"

namespace tpserve::cpu {
namespace {

struct Shape {
  int64_t m, n, k;
};

// Checks c against the triple loop in double. Each element's error is measured relative to
// sum_k |a_ik b_jk|, the scale of the rounding any fp32 summation order can produce.
void ExpectMatchesNaive(const std::vector<float>& a, const std::vector<float>& b,
                        const std::vector<float>& c, const std::vector<float>& c0, const Shape& s) {
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double want = c0.empty() ? 0.0 : c0[i * s.n + j];
      double magnitude = std::abs(want);
      for (int64_t p = 0; p < s.k; ++p) {
        const double term = double{a[i * s.k + p]} * b[j * s.k + p];
        want += term;
        magnitude += std::abs(term);
      }
      const double error = std::abs(c[i * s.n + j] - want);
      ASSERT_LE(error, 1e-5 * std::max(magnitude, 1e-30))
          << "m=" << s.m << " n=" << s.n << " k=" << s.k << " at (" << i << ", " << j << ")";
    }
  }
}

TEST(MatmulBTTest, HandComputed) {
  // a = [[1, 2, 3], [4, 5, 6]], b rows = [1, 0, -1], [2, 1, 0] -> c = a b^T.
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {1, 0, -1, 2, 1, 0};
  std::vector<float> c(4);
  MatmulBT(a.data(), b.data(), 2, 2, 3, c.data());
  EXPECT_EQ(c, (std::vector<float>{-2, 4, -2, 13}));
}

TEST(MatmulBTTest, MatchesNaiveLoop) {
  // Every row count of the streamed path (1 to kStreamedRowsMax: groups of 4 and each remainder),
  // weight rows in passes of 4 and a remainder, k below one vector, with a masked tail, across
  // several 2,048-float slices; then OpenBLAS's sizes.
  const Shape shapes[] = {{1, 1, 1},     {1, 49, 576},  {2, 5, 15},    {3, 7, 4113}, {4, 9, 33},
                          {5, 6, 2048},  {6, 3, 100},   {7, 192, 576}, {8, 4, 31},   {9, 11, 4096},
                          {13, 10, 17},  {16, 66, 577}, {17, 30, 40},  {33, 65, 17}, {64, 64, 64},
                          {3, 1536, 64}, {130, 70, 300}};
  uint64_t seed = 1;
  for (const Shape& s : shapes) {
    const std::vector<float> a = RandomVector(s.m * s.k, 1.0f, seed++);
    const std::vector<float> b = RandomVector(s.n * s.k, 1.0f, seed++);
    // beta = 0 must not read c: start from NaN.
    std::vector<float> c(s.m * s.n, std::numeric_limits<float>::quiet_NaN());
    MatmulBT(a.data(), b.data(), s.m, s.n, s.k, c.data());
    ExpectMatchesNaive(a, b, c, {}, s);
  }
}

// Up to kStreamedRowsMax rows, a row's outputs are the same bits whatever the other rows (a
// decode row alone or beside the verification of speculated tokens), and whichever thread takes
// which weight rows.
TEST(MatmulBTTest, RowsDoNotDependOnTheBatch) {
  const int64_t n = 37, k = 2500;
  const std::vector<float> a = RandomVector(kStreamedRowsMax * k, 1.0f, 21);
  const std::vector<float> b = RandomVector(n * k, 1.0f, 22);
  std::vector<float> all(kStreamedRowsMax * n);
  MatmulBT(a.data(), b.data(), kStreamedRowsMax, n, k, all.data());
  for (int64_t first = 0; first < kStreamedRowsMax; first += 5) {
    const int64_t rows = std::min<int64_t>(first % 4 + 1, kStreamedRowsMax - first);
    std::vector<float> some(rows * n);
    MatmulBT(a.data() + first * k, b.data(), rows, n, k, some.data());
    for (int64_t i = 0; i < rows * n; ++i) {
      ASSERT_EQ(some[i], all[first * n + i]) << "row " << first + i / n << " of " << rows;
    }
  }
}

TEST(MatmulBTTest, Accumulates) {
  const Shape s = {9, 31, 130};
  const std::vector<float> a = RandomVector(s.m * s.k, 1.0f, 11);
  const std::vector<float> b = RandomVector(s.n * s.k, 1.0f, 12);
  const std::vector<float> c0 = RandomVector(s.m * s.n, 1.0f, 13);
  std::vector<float> c = c0;
  MatmulBT(a.data(), b.data(), s.m, s.n, s.k, c.data(), /*accumulate=*/true);
  ExpectMatchesNaive(a, b, c, c0, s);
}

TEST(MatmulBTTest, EmptyInnerDimension) {
  std::vector<float> c(6, 3.0f);
  MatmulBT(nullptr, nullptr, 2, 3, 0, c.data(), /*accumulate=*/true);
  EXPECT_EQ(c, std::vector<float>(6, 3.0f));
  MatmulBT(nullptr, nullptr, 2, 3, 0, c.data());
  EXPECT_EQ(c, std::vector<float>(6, 0.0f));
  MatmulBT(nullptr, nullptr, 0, 3, 5, nullptr);  // no rows: nothing to touch
}

}  // namespace
}  // namespace tpserve::cpu
