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

// Per block, on paper: q16 = x * 32512 / max|x| rounded to nearest, split as 256 h + l with h a
// signed byte and l in [-128, 127]; row 2i holds h at d = 256 max|x| / 32512, row 2i + 1 holds l at
// max|x| / 32512, so x - (d_h h + d_l l) is at most max|x| / 65024.
TEST(QuantizeActivations16Test, SplitsEachBlockIntoTwoSignedBytes) {
  const int64_t rows = 3, k = 96, blocks = k / 32;
  std::vector<float> x = RandomVector(rows * k, 4.0f, 13);
  for (int j = 32; j < 64; ++j) x[j] = 0.0f;
  x[70] = -7.5f;  // the largest magnitude negative: h = -127
  QuantizedActivations a;
  QuantizeActivations16(x.data(), rows, k, &a);
  ASSERT_EQ(a.rows, 2 * rows);
  ASSERT_EQ(a.q.size(), static_cast<size_t>(2 * rows * k));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float* v = x.data() + i * k + blk * 32;
      float max_abs = 0.0f;
      for (int j = 0; j < 32; ++j) max_abs = std::max(max_abs, std::abs(v[j]));
      const int64_t high = 2 * i * blocks + blk, low = high + blocks;
      EXPECT_FLOAT_EQ(a.d[low], max_abs / 32512.0f);
      EXPECT_EQ(a.d[high], 256.0f * a.d[low]);
      int32_t sum_h = 0, sum_l = 0, lo_h = 0, lo_l = 0;
      for (int j = 0; j < 32; ++j) {
        const int h = a.q[high * 32 + j], l = a.q[low * 32 + j];
        EXPECT_GE(h, -127);
        EXPECT_LE(h, 127);
        const long q16 = max_abs == 0.0f ? 0 : std::lround(v[j] * 32512.0 / max_abs);
        EXPECT_LE(std::abs(256 * h + l - q16), 1) << "row " << i << " block " << blk << " " << j;
        EXPECT_LE(std::abs(v[j] - (a.d[high] * h + a.d[low] * l)), max_abs / 65024 * 1.001 + 1e-30)
            << "row " << i << " block " << blk << " element " << j;
        sum_h += h;
        sum_l += l;
        if (j == 15) lo_h = sum_h, lo_l = sum_l;
      }
      EXPECT_EQ(a.sum[high], sum_h);
      EXPECT_EQ(a.sum[low], sum_l);
      EXPECT_EQ(a.sum_lo[high], lo_h);
      EXPECT_EQ(a.sum_lo[low], lo_l);
      EXPECT_EQ(a.d_sum[low], a.d[low] * static_cast<float>(sum_l));
    }
  }
  EXPECT_EQ(a.q[2 * 32 + 6], -127);  // x[70]: row 0's high bytes, block 2, element 6
  EXPECT_EQ(a.d[1], 0.0f);
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
