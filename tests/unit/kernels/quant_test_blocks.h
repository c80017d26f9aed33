// Random GGUF blocks for the quantized-kernel tests, and their fp32 decode by model/dequantize.h
// (the decoder checked bit for bit against ggml's reference): what the kernels are compared with.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "kernels/cpu/packed_weight.h"
#include "model/dequantize.h"
#include "model/ggml_type.h"

namespace tpserve::cpu {

struct Format {
  BlockFormat format;
  GgmlType ggml;
  const char* name;
};

inline constexpr Format kFormats[] = {
    {BlockFormat::kQ4_0, GgmlType::kQ4_0, "Q4_0"}, {BlockFormat::kQ4_1, GgmlType::kQ4_1, "Q4_1"},
    {BlockFormat::kQ8_0, GgmlType::kQ8_0, "Q8_0"}, {BlockFormat::kQ4_K, GgmlType::kQ4_K, "Q4_K"},
    {BlockFormat::kQ5_K, GgmlType::kQ5_K, "Q5_K"}, {BlockFormat::kQ6_K, GgmlType::kQ6_K, "Q6_K"}};

// `k` columns, or the next multiple of 256 for a K-quant (whose blocks hold 256 elements).
inline int64_t Cols(const Format& f, int64_t k) {
  const int64_t block = GgufBlockElements(f.format);
  return (k + block - 1) / block * block;
}

// A random normal fp16 with magnitude in [2^-12, 2^-1), either sign; or, when `edge` is set,
// sometimes zero or a subnormal, to exercise every branch of the half decode.
inline uint16_t RandomHalf(std::mt19937_64& rng, bool edge) {
  std::uniform_int_distribution<int> exponent(3, 14);
  std::uniform_int_distribution<int> mantissa(0, 0x3FF);
  std::uniform_int_distribution<int> coin(0, 7);
  const uint16_t sign = coin(rng) < 4 ? 0x8000 : 0;
  if (edge && coin(rng) == 0) return sign | static_cast<uint16_t>(mantissa(rng));  // subnormal, 0
  return sign | static_cast<uint16_t>(exponent(rng) << 10) | static_cast<uint16_t>(mantissa(rng));
}

// [n, k] weights of `format` as random blocks: random quants, random scales (and mins).
inline std::vector<uint8_t> RandomBlocks(BlockFormat format, int64_t n, int64_t k, uint64_t seed,
                                         bool edge = false) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  const int64_t block_bytes = BlockBytes(format);
  std::vector<uint8_t> blocks(n * k / GgufBlockElements(format) * block_bytes);
  // Where each format keeps its fp16 factors: d (and Q4_1's m, Q4_K's and Q5_K's dmin) first,
  // Q6_K's d last.
  const int64_t d_at = format == BlockFormat::kQ6_K ? 208 : 0;
  const bool second =
      format == BlockFormat::kQ4_1 || format == BlockFormat::kQ4_K || format == BlockFormat::kQ5_K;
  for (size_t at = 0; at < blocks.size(); at += block_bytes) {
    for (int64_t i = 0; i < block_bytes; ++i) blocks[at + i] = static_cast<uint8_t>(byte(rng));
    const uint16_t d = RandomHalf(rng, edge);
    std::memcpy(&blocks[at + d_at], &d, 2);
    if (second) {
      const uint16_t m = RandomHalf(rng, edge);
      std::memcpy(&blocks[at + 2], &m, 2);
    }
  }
  return blocks;
}

inline std::vector<float> DecodeBlocks(const Format& f, const std::vector<uint8_t>& blocks,
                                       int64_t n, int64_t k) {
  std::vector<float> w(n * k);
  const absl::Status status = Dequantize(f.ggml, blocks, absl::MakeSpan(w));
  EXPECT_TRUE(status.ok()) << status;
  return w;
}

}  // namespace tpserve::cpu
