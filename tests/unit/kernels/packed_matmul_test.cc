#include "kernels/cpu/packed_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/quantized_activations.h"
#include "tests/unit/kernels/quant_test_blocks.h"
#include "tests/unit/kernels/random_vector.h"

namespace tpserve::cpu {
namespace {

std::vector<PackedIsa> SupportedIsas() {
  std::vector<PackedIsa> isas;
  for (PackedIsa isa :
       {PackedIsa::kPortable, PackedIsa::kAvx2, PackedIsa::kAvx512Vnni, PackedIsa::kAmx}) {
    if (PackedIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

struct Shape {
  int64_t n, k;
};
// Shapes whose k a format's blocks do not divide are skipped for it: K-quants take 256, 512, 1536.
constexpr Shape kShapes[] = {{1, 32},    {7, 96},   {33, 576}, {130, 64},
                             {16, 1536}, {300, 32}, {5, 256},  {37, 512}};
constexpr int64_t kRows[] = {1, 2, 3, 5, 8, 15, 16, 17, 40};

// Against the math on paper: the weights decoded by model/dequantize.h times the activations as
// their 8-bit blocks represent them (d * q), summed in double. What the kernel adds is only fp32
// rounding, bounded relative to sum |w| |d q|. On every instruction set this CPU has.
TEST(PackedMatmulTest, MatchesDecodedWeightsTimesDecodedActivations) {
  uint64_t seed = 1;
  for (const Format& f : kFormats) {
    for (const Shape& s : kShapes) {
      if (s.k % GgufBlockElements(f.format) != 0) continue;
      const std::vector<uint8_t> blocks = RandomBlocks(f.format, s.n, s.k, ++seed);
      const std::vector<float> w = DecodeBlocks(f, blocks, s.n, s.k);
      const PackedWeight packed = PackWeight(f.format, blocks.data(), s.n, s.k);
      for (int64_t m : kRows) {
        const std::vector<float> x = RandomVector(m * s.k, 2.0f, ++seed);
        QuantizedActivations a;
        QuantizeActivations(x.data(), m, s.k, &a);
        for (PackedIsa isa : SupportedIsas()) {
          std::vector<float> c(m * s.n, NAN);
          PackedMatmulBT(a, packed, 0, s.n, c.data(), isa);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < s.n; ++j) {
              double want = 0, magnitude = 0;
              for (int64_t p = 0; p < s.k; ++p) {
                const double xq = double{a.d[(i * s.k + p) / 32]} * a.q[i * s.k + p];
                want += xq * w[j * s.k + p];
                magnitude += std::abs(xq * w[j * s.k + p]);
              }
              ASSERT_LE(std::abs(c[i * s.n + j] - want), 2e-6 * magnitude + 1e-30)
                  << f.name << " " << PackedIsaName(isa) << " m=" << m << " n=" << s.n
                  << " k=" << s.k << " at (" << i << ", " << j << ")";
            }
          }
        }
      }
    }
  }
}

// Against the fp32 activations themselves: rounding x to d q moves each product by at most
// |w| d / 2, so |c - x · w| <= sum over blocks of d_x / 2 * sum |w| (plus fp32 rounding). At 16
// bits d = max|x| / 32512 (the split into two bytes is exact), so the bound is max|x| / 65024 per
// block, within 1/256 of the 8-bit one, plus the rounding of the two halves' sums.
TEST(PackedMatmulTest, ActivationRoundingStaysWithinItsBoundAtEightAndSixteenBits) {
  for (const Format& f : kFormats) {
    const int64_t n = 40, k = Cols(f, 576), m = 3;
    const std::vector<uint8_t> blocks = RandomBlocks(f.format, n, k, 21);
    const std::vector<float> w = DecodeBlocks(f, blocks, n, k);
    const PackedWeight packed = PackWeight(f.format, blocks.data(), n, k);
    const std::vector<float> x = RandomVector(m * k, 1.0f, 22);
    QuantizedActivations a;
    QuantizeActivations(x.data(), m, k, &a);
    std::vector<float> c8(m * n), c16(m * n);
    PackedMatmulBT(x.data(), m, packed, 0, n, c8.data(), ActivationBits::k8);
    PackedMatmulBT(x.data(), m, packed, 0, n, c16.data(), ActivationBits::k16);
    double error8 = 0, error16 = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, bound8 = 0, bound16 = 0, magnitude = 0;
        for (int64_t blk = 0; blk < k / 32; ++blk) {
          double max_abs = 0, w_abs = 0;
          for (int64_t p = blk * 32; p < blk * 32 + 32; ++p) {
            exact += double{x[i * k + p]} * w[j * k + p];
            max_abs = std::max(max_abs, std::abs(double{x[i * k + p]}));
            w_abs += std::abs(w[j * k + p]);
            magnitude += std::abs(double{x[i * k + p]} * w[j * k + p]);
          }
          bound8 += a.d[(i * k) / 32 + blk] / 2.0 * w_abs;
          bound16 += max_abs / 65024 * w_abs;
        }
        EXPECT_LE(std::abs(c8[i * n + j] - exact), bound8 + 2e-6 * magnitude)
            << f.name << " 8 bits at (" << i << ", " << j << ")";
        EXPECT_LE(std::abs(c16[i * n + j] - exact), bound16 + 4e-6 * magnitude)
            << f.name << " 16 bits at (" << i << ", " << j << ")";
        error8 += std::abs(c8[i * n + j] - exact);
        error16 += std::abs(c16[i * n + j] - exact);
      }
    }
    // The 8-bit rounding is ~256 times coarser: a split that dropped its low bytes would not be.
    EXPECT_LT(error16 * 20, error8) << f.name;
  }
}

// The stated operations are the same on every instruction set: identical bits. And an output does
// not depend on which rows share the call (m = 1 vs 40) or on the slice of weight rows asked for
// (an unaligned start, a partial group).
TEST(PackedMatmulTest, SameBitsOnEveryIsaEveryBatchAndEverySlice) {
  uint64_t seed = 100;
  for (const Format& f : kFormats) {
    const int64_t n = 70, k = Cols(f, 192), m = 40;
    const std::vector<uint8_t> blocks = RandomBlocks(f.format, n, k, ++seed);
    const PackedWeight packed = PackWeight(f.format, blocks.data(), n, k);
    const std::vector<float> x = RandomVector(m * k, 3.0f, ++seed);
    QuantizedActivations all;
    QuantizeActivations(x.data(), m, k, &all);
    std::vector<float> want(m * n);
    PackedMatmulBT(all, packed, 0, n, want.data(), PackedIsa::kPortable);
    for (PackedIsa isa : SupportedIsas()) {
      std::vector<float> got(m * n);
      PackedMatmulBT(all, packed, 0, n, got.data(), isa);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << f.name << " " << PackedIsaName(isa);
      for (int64_t i : {0, 17, 39}) {
        QuantizedActivations one;
        QuantizeActivations(x.data() + i * k, 1, k, &one);
        std::vector<float> row(n);
        PackedMatmulBT(one, packed, 0, n, row.data(), isa);
        EXPECT_EQ(std::memcmp(row.data(), want.data() + i * n, n * sizeof(float)), 0)
            << f.name << " " << PackedIsaName(isa) << " row " << i << " alone";
      }
      const int64_t first = 5, count = 50;
      std::vector<float> slice(m * count);
      PackedMatmulBT(all, packed, first, count, slice.data(), isa);
      for (int64_t i = 0; i < m; ++i) {
        EXPECT_EQ(std::memcmp(slice.data() + i * count, want.data() + i * n + first,
                              count * sizeof(float)),
                  0)
            << f.name << " " << PackedIsaName(isa) << " rows [5, 55) of row " << i;
      }
    }
  }
}

// At 16 bits the rows go through in groups (a bounded buffer for the halves): a row's output is
// the same bits in a call of 150 rows as alone.
TEST(PackedMatmulTest, SixteenBitRowsAreIndependentOfTheirCall) {
  const int64_t n = 40, k = 96, m = 150;
  const std::vector<uint8_t> blocks = RandomBlocks(BlockFormat::kQ4_1, n, k, 31);
  const PackedWeight packed = PackWeight(BlockFormat::kQ4_1, blocks.data(), n, k);
  const std::vector<float> x = RandomVector(m * k, 2.0f, 32);
  std::vector<float> all(m * n), one(n);
  PackedMatmulBT(x.data(), m, packed, 0, n, all.data(), ActivationBits::k16);
  for (int64_t i : {0, 63, 64, 127, 128, 149}) {
    PackedMatmulBT(x.data() + i * k, 1, packed, 0, n, one.data(), ActivationBits::k16);
    EXPECT_EQ(std::memcmp(one.data(), all.data() + i * n, n * sizeof(float)), 0) << "row " << i;
  }
}

TEST(PackedMatmulTest, ZeroSizes) {
  const std::vector<uint8_t> blocks = RandomBlocks(BlockFormat::kQ4_1, 3, 32, 5);
  const PackedWeight w = PackWeight(BlockFormat::kQ4_1, blocks.data(), 3, 32);
  const std::vector<float> a = RandomVector(2 * 32, 1.0f, 6);
  for (ActivationBits bits : {ActivationBits::k8, ActivationBits::k16}) {
    std::vector<float> c(6, NAN);
    PackedMatmulBT(a.data(), 0, w, 0, 3, c.data(), bits);
    PackedMatmulBT(a.data(), 2, w, 0, 0, c.data(), bits);
    EXPECT_TRUE(std::isnan(c[0]));
    const PackedWeight empty = PackWeight(BlockFormat::kQ4_1, blocks.data(), 3, 0);
    PackedMatmulBT(a.data(), 2, empty, 0, 3, c.data(), bits);
    EXPECT_EQ(c, std::vector<float>(6, 0.0f));
  }
}

}  // namespace
}  // namespace tpserve::cpu
