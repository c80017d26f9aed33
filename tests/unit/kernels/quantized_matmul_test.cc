#include "kernels/cpu/quantized_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "model/dequantize.h"
#include "model/ggml_type.h"
#include "tests/unit/kernels/random_vector.h"

namespace tpserve::cpu {
namespace {

struct Format {
  BlockFormat format;
  GgmlType ggml;
  const char* name;
};

constexpr Format kFormats[] = {{BlockFormat::kQ4_0, GgmlType::kQ4_0, "Q4_0"},
                               {BlockFormat::kQ4_1, GgmlType::kQ4_1, "Q4_1"},
                               {BlockFormat::kQ8_0, GgmlType::kQ8_0, "Q8_0"}};

// A random normal fp16 with magnitude in [2^-12, 2^-1), either sign; or, when `edge` is set,
// sometimes zero or a subnormal, to exercise every branch of the half decode.
uint16_t RandomHalf(std::mt19937_64& rng, bool edge) {
  std::uniform_int_distribution<int> exponent(3, 14);
  std::uniform_int_distribution<int> mantissa(0, 0x3FF);
  std::uniform_int_distribution<int> coin(0, 7);
  const uint16_t sign = coin(rng) < 4 ? 0x8000 : 0;
  if (edge && coin(rng) == 0) return sign | static_cast<uint16_t>(mantissa(rng));  // subnormal, 0
  return sign | static_cast<uint16_t>(exponent(rng) << 10) | static_cast<uint16_t>(mantissa(rng));
}

// [n, k] weights of `format` as random blocks: random quants, random scales (and mins).
std::vector<uint8_t> RandomBlocks(BlockFormat format, int64_t n, int64_t k, uint64_t seed,
                                  bool edge = false) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  const int64_t block_bytes = BlockBytes(format);
  std::vector<uint8_t> blocks(n * k / kBlockElements * block_bytes);
  for (size_t at = 0; at < blocks.size(); at += block_bytes) {
    for (int64_t i = 0; i < block_bytes; ++i) blocks[at + i] = static_cast<uint8_t>(byte(rng));
    const uint16_t d = RandomHalf(rng, edge);
    std::memcpy(&blocks[at], &d, 2);
    if (format == BlockFormat::kQ4_1) {
      const uint16_t m = RandomHalf(rng, edge);
      std::memcpy(&blocks[at + 2], &m, 2);
    }
  }
  return blocks;
}

std::vector<float> Reference(const Format& f, const std::vector<uint8_t>& blocks, int64_t n,
                             int64_t k) {
  std::vector<float> w(n * k);
  const absl::Status status = Dequantize(f.ggml, blocks, absl::MakeSpan(w));
  EXPECT_TRUE(status.ok()) << status;
  return w;
}

TEST(QuantizedMatmulTest, BlockBytesMatchGguf) {
  for (const Format& f : kFormats) {
    EXPECT_EQ(BlockBytes(f.format),
              GetGgmlTypeTraits(static_cast<uint32_t>(f.ggml))->block_bytes)
        << f.name;
  }
}

TEST(QuantizedMatmulTest, DequantizeIsBitExactWithModelDecoder) {
  for (const Format& f : kFormats) {
    const int64_t n = 9, k = 96;
    const std::vector<uint8_t> blocks = RandomBlocks(f.format, n, k, 7, /*edge=*/true);
    const std::vector<float> want = Reference(f, blocks, n, k);
    std::vector<float> got(n * k);
    DequantizeBlockRows(f.format, blocks.data(), n, k, got.data());
    for (int64_t i = 0; i < n * k; ++i) {
      ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
          << f.name << " element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

// Every m (GEMV path up to kQuantizedGemvMaxRows, tiled SGEMM above) and odd row counts, against
// the decoded weights and a naive dot in double. Each element's error is measured relative to
// sum_k |a_ik w_jk|, the scale of the rounding any fp32 summation order can produce.
TEST(QuantizedMatmulTest, MatchesDequantizeThenNaiveDot) {
  struct Shape {
    int64_t n, k;
  };
  const Shape shapes[] = {{1, 32}, {7, 96}, {33, 576}, {130, 64}, {5, 1536}, {2100, 32}};
  const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 64};
  uint64_t seed = 1;
  for (const Format& f : kFormats) {
    for (const Shape& s : shapes) {
      const std::vector<uint8_t> blocks = RandomBlocks(f.format, s.n, s.k, ++seed);
      const std::vector<float> w = Reference(f, blocks, s.n, s.k);
      for (int64_t m : ms) {
        const std::vector<float> a = RandomVector(m * s.k, 1.0f, ++seed);
        std::vector<float> c(m * s.n, NAN);
        QuantizedMatmulBT(a.data(), f.format, blocks.data(), m, s.n, s.k, c.data());
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < s.n; ++j) {
            double want = 0, magnitude = 0;
            for (int64_t p = 0; p < s.k; ++p) {
              const double term = double{a[i * s.k + p]} * w[j * s.k + p];
              want += term;
              magnitude += std::abs(term);
            }
            ASSERT_LE(std::abs(c[i * s.n + j] - want), 1e-5 * std::max(magnitude, 1e-30))
                << f.name << " m=" << m << " n=" << s.n << " k=" << s.k << " at (" << i << ", "
                << j << ")";
          }
        }
      }
    }
  }
}

TEST(QuantizedMatmulTest, ZeroSizes) {
  const std::vector<uint8_t> blocks = RandomBlocks(BlockFormat::kQ4_1, 3, 32, 5);
  const std::vector<float> a = RandomVector(2 * 32, 1.0f, 6);
  std::vector<float> c(6, NAN);
  QuantizedMatmulBT(a.data(), BlockFormat::kQ4_1, blocks.data(), 0, 3, 32, c.data());
  QuantizedMatmulBT(a.data(), BlockFormat::kQ4_1, blocks.data(), 2, 0, 32, c.data());
  EXPECT_TRUE(std::isnan(c[0]));
  QuantizedMatmulBT(a.data(), BlockFormat::kQ4_1, blocks.data(), 2, 3, 0, c.data());
  EXPECT_EQ(c, std::vector<float>(6, 0.0f));
}

}  // namespace
}  // namespace tpserve::cpu
