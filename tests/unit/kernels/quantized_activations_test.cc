#include "kernels/cpu/quantized_activations.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/unit/kernels/random_vector.h"

namespace tpserve::cpu {
namespace {

// Per block, on paper: d = max|x| / 127, q = x / d rounded to nearest (so |x - d q| <= d / 2 and
// the largest |q| is 127), sum, sum_lo and d_sum follow from q.
TEST(QuantizeActivationsTest, RoundsEachBlockToItsOwnScale) {
  const int64_t rows = 3, k = 96;
  std::vector<float> x = RandomVector(rows * k, 4.0f, 11);
  for (int j = 32; j < 64; ++j) x[j] = 0.0f;  // an all-zero block: d = 0, q = 0
  x[70] = 7.5f;                               // a block whose maximum is exactly known
  QuantizedActivations a;
  QuantizeActivations(x.data(), rows, k, &a);
  ASSERT_EQ(a.q.size(), static_cast<size_t>(rows * k));
  for (int64_t b = 0; b < rows * k / 32; ++b) {
    float max_abs = 0.0f;
    for (int j = 0; j < 32; ++j) max_abs = std::max(max_abs, std::abs(x[b * 32 + j]));
    EXPECT_FLOAT_EQ(a.d[b], max_abs / 127.0f) << "block " << b;
    int32_t sum = 0, sum_lo = 0, largest = 0;
    for (int j = 0; j < 32; ++j) {
      const int q = a.q[b * 32 + j];
      sum += q;
      if (j < 16) sum_lo += q;
      largest = std::max(largest, std::abs(q));
      EXPECT_LE(std::abs(x[b * 32 + j] - a.d[b] * q), a.d[b] / 2 * 1.0001f + 1e-30f)
          << "block " << b << " element " << j;
    }
    EXPECT_EQ(a.sum[b], sum);
    EXPECT_EQ(a.sum_lo[b], sum_lo);
    EXPECT_EQ(a.d_sum[b], a.d[b] * static_cast<float>(sum));
    EXPECT_EQ(largest, max_abs == 0.0f ? 0 : 127) << "block " << b;
  }
  EXPECT_EQ(a.d[1], 0.0f);
  EXPECT_EQ(a.d[2], 7.5f / 127.0f);
}

// The vector path (used when the CPU has it) gives the scalar path's bits, ties included.
TEST(QuantizeActivationsTest, VectorPathEqualsScalarPath) {
  const int64_t rows = 17, k = 576;
  std::vector<float> x = RandomVector(rows * k, 3.0f, 12);
  // Exact halves after scaling: max 127 makes x * 127 / 127 = x, so x = 2.5 is a tie.
  for (int j = 0; j < 32; ++j) x[j] = j % 2 == 0 ? 2.5f : -0.5f;
  x[5] = 127.0f;
  QuantizedActivations vec, scalar;
  QuantizeActivations(x.data(), rows, k, &vec);
  QuantizeActivationsScalar(x.data(), rows, k, &scalar);
  EXPECT_EQ(vec.q, scalar.q);
  EXPECT_EQ(vec.d, scalar.d);
  EXPECT_EQ(vec.sum, scalar.sum);
  EXPECT_EQ(vec.sum_lo, scalar.sum_lo);
  EXPECT_EQ(vec.d_sum, scalar.d_sum);
  EXPECT_EQ(scalar.q[0], 2);  // 2.5 rounds half to even
  EXPECT_EQ(scalar.q[1], 0);  // -0.5 too
}

}  // namespace
}  // namespace tpserve::cpu
