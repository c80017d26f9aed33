#include "kernels/cpu/quantized_matmul.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// This file is compiled with -ffp-contract=off (kernels/CMakeLists.txt): the weight decode
// q * d + m must round twice like ggml's reference, never fuse into one FMA. The FMAs of the dot
// products are written explicitly.

namespace tpserve::cpu {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF blocks are little-endian");

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// IEEE half to float, exact for every input (the same function as model/dequantize.cc).
inline float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13));
}

// Decodes one block of `format` into w[32], with the reference's float operations.
inline void DecodeBlock(BlockFormat format, const uint8_t* block, float* w) {
  switch (format) {
    case BlockFormat::kQ4_0: {
      const float d = HalfToFloat(LoadU16(block));
      const uint8_t* qs = block + 2;
      for (int j = 0; j < 16; ++j) {
        w[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
        w[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
      }
      return;
    }
    case BlockFormat::kQ4_1: {
      const float d = HalfToFloat(LoadU16(block));
      const float m = HalfToFloat(LoadU16(block + 2));
      const uint8_t* qs = block + 4;
      for (int j = 0; j < 16; ++j) {
        w[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
        w[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
      }
      return;
    }
    case BlockFormat::kQ8_0: {
      const float d = HalfToFloat(LoadU16(block));
      const int8_t* qs = reinterpret_cast<const int8_t*>(block + 2);
      for (int j = 0; j < 32; ++j) w[j] = static_cast<float>(qs[j]) * d;
      return;
    }
  }
  TP_CHECK(false);
}

// Portable GEMV: rows [0, n) of b against the m rows of a, one decoded block at a time. Eight
// partial sums per row of a let the compiler vectorize the 32-element dot product.
void GemvPortable(const float* a, BlockFormat format, const uint8_t* b, int64_t m, int64_t n,
                  int64_t k, float* c) {
  const int64_t blocks = k / kBlockElements;
  const int64_t row_bytes = blocks * BlockBytes(format);
#pragma omp parallel for schedule(static) num_threads(CpuThreads())
  for (int64_t row = 0; row < n; ++row) {
    float partial[kQuantizedGemvMaxRows][8] = {};
    alignas(32) float w[kBlockElements];
    for (int64_t blk = 0; blk < blocks; ++blk) {
      DecodeBlock(format, b + row * row_bytes + blk * BlockBytes(format), w);
      for (int64_t t = 0; t < m; ++t) {
        const float* x = a + t * k + blk * kBlockElements;
        for (int i = 0; i < kBlockElements; i += 8) {
          for (int l = 0; l < 8; ++l) partial[t][l] += w[i + l] * x[i + l];
        }
      }
    }
    for (int64_t t = 0; t < m; ++t) {
      float sum = 0.0f;
      for (int l = 0; l < 8; ++l) sum += partial[t][l];
      c[t * n + row] = sum;
    }
  }
}

#if defined(__x86_64__)
#define TP_AVX2 __attribute__((target("avx2,fma,f16c")))

TP_AVX2 inline float HalfToFloatF16c(const uint8_t* p) { return _cvtsh_ss(LoadU16(p)); }

// The 32 weights of one block in four vectors, decoded exactly as DecodeBlock does.
template <BlockFormat kFormat>
TP_AVX2 inline void DecodeBlockAvx2(const uint8_t* block, __m256* w) {
  if constexpr (kFormat == BlockFormat::kQ8_0) {
    const __m256 d = _mm256_set1_ps(HalfToFloatF16c(block));
    for (int i = 0; i < 4; ++i) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + 8 * i));
      w[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), d);
    }
  } else {
    constexpr int kQsOffset = kFormat == BlockFormat::kQ4_1 ? 4 : 2;
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + kQsOffset));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(raw, mask);                     // elements 0..15
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);  // elements 16..31
    __m256i q[4] = {_mm256_cvtepu8_epi32(lo), _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)),
                    _mm256_cvtepu8_epi32(hi), _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))};
    const __m256 d = _mm256_set1_ps(HalfToFloatF16c(block));
    if constexpr (kFormat == BlockFormat::kQ4_0) {
      const __m256i eight = _mm256_set1_epi32(8);
      for (int i = 0; i < 4; ++i) {
        w[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q[i], eight)), d);
      }
    } else {
      const __m256 mn = _mm256_set1_ps(HalfToFloatF16c(block + 2));
      for (int i = 0; i < 4; ++i) {
        w[i] = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q[i]), d), mn);
      }
    }
  }
}

TP_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// GEMV for exactly kM rows of a. One row alone would be bound by the FMA latency of a single
// accumulator, so it keeps four; two rows keep two each; more rows have enough independent work.
template <BlockFormat kFormat, int kM>
TP_AVX2 void GemvAvx2(const float* a, const uint8_t* b, int64_t n, int64_t k, float* c) {
  constexpr int kAcc = kM == 1 ? 4 : (kM == 2 ? 2 : 1);
  const int64_t blocks = k / kBlockElements;
  const int64_t block_bytes = BlockBytes(kFormat);
  const int64_t row_bytes = blocks * block_bytes;
#pragma omp parallel for schedule(static) num_threads(CpuThreads())
  for (int64_t row = 0; row < n; ++row) {
    const uint8_t* block = b + row * row_bytes;
    __m256 acc[kM][kAcc];
    for (int t = 0; t < kM; ++t) {
      for (int j = 0; j < kAcc; ++j) acc[t][j] = _mm256_setzero_ps();
    }
    for (int64_t blk = 0; blk < blocks; ++blk, block += block_bytes) {
      __m256 w[4];
      DecodeBlockAvx2<kFormat>(block, w);
      for (int t = 0; t < kM; ++t) {
        const float* x = a + t * k + blk * kBlockElements;
        for (int i = 0; i < 4; ++i) {
          acc[t][i % kAcc] = _mm256_fmadd_ps(w[i], _mm256_loadu_ps(x + 8 * i), acc[t][i % kAcc]);
        }
      }
    }
    for (int t = 0; t < kM; ++t) {
      __m256 sum = acc[t][0];
      for (int j = 1; j < kAcc; ++j) sum = _mm256_add_ps(sum, acc[t][j]);
      c[t * n + row] = HorizontalSum(sum);
    }
  }
}

template <BlockFormat kFormat>
void GemvAvx2Dispatch(const float* a, const uint8_t* b, int64_t m, int64_t n, int64_t k,
                      float* c) {
  switch (m) {
    case 1: return GemvAvx2<kFormat, 1>(a, b, n, k, c);
    case 2: return GemvAvx2<kFormat, 2>(a, b, n, k, c);
    case 3: return GemvAvx2<kFormat, 3>(a, b, n, k, c);
    case 4: return GemvAvx2<kFormat, 4>(a, b, n, k, c);
    case 5: return GemvAvx2<kFormat, 5>(a, b, n, k, c);
    case 6: return GemvAvx2<kFormat, 6>(a, b, n, k, c);
    case 7: return GemvAvx2<kFormat, 7>(a, b, n, k, c);
    case 8: return GemvAvx2<kFormat, 8>(a, b, n, k, c);
  }
  TP_CHECK(false);
}
static_assert(kQuantizedGemvMaxRows == 8, "GemvAvx2Dispatch instantiates m = 1..8");

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has;
}
#endif  // __x86_64__

void Gemv(const float* a, BlockFormat format, const uint8_t* b, int64_t m, int64_t n, int64_t k,
          float* c) {
#if defined(__x86_64__)
  if (HasAvx2()) {
    switch (format) {
      case BlockFormat::kQ4_0: return GemvAvx2Dispatch<BlockFormat::kQ4_0>(a, b, m, n, k, c);
      case BlockFormat::kQ4_1: return GemvAvx2Dispatch<BlockFormat::kQ4_1>(a, b, m, n, k, c);
      case BlockFormat::kQ8_0: return GemvAvx2Dispatch<BlockFormat::kQ8_0>(a, b, m, n, k, c);
    }
  }
#endif
  GemvPortable(a, format, b, m, n, k, c);
}

// Large m: decode up to ~4 MiB of b's rows at a time (fits the last-level cache next to the
// activations) into a per-thread scratch and let SGEMM write those columns of c.
void TiledSgemm(const float* a, BlockFormat format, const uint8_t* b, int64_t m, int64_t n,
                int64_t k, float* c) {
  constexpr int64_t kTileFloats = int64_t{1} << 20;
  const int64_t tile_rows = std::max<int64_t>(64, kTileFloats / k);
  const int64_t row_bytes = k / kBlockElements * BlockBytes(format);
  thread_local std::vector<float> scratch;
  scratch.resize(std::min(tile_rows, n) * k);
  for (int64_t begin = 0; begin < n; begin += tile_rows) {
    const int64_t rows = std::min(tile_rows, n - begin);
    float* tile = scratch.data();
#pragma omp parallel for schedule(static) num_threads(CpuThreads())
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeBlockRows(format, b + (begin + r) * row_bytes, 1, k, tile + r * k);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                static_cast<blasint>(rows), static_cast<blasint>(k), 1.0f, a,
                static_cast<blasint>(k), tile, static_cast<blasint>(k), 0.0f, c + begin,
                static_cast<blasint>(n));
  }
}

}  // namespace

int64_t BlockBytes(BlockFormat format) {
  switch (format) {
    case BlockFormat::kQ4_0: return 18;
    case BlockFormat::kQ4_1: return 20;
    case BlockFormat::kQ8_0: return 34;
  }
  TP_CHECK(false);
  return 0;
}

void DequantizeBlockRows(BlockFormat format, const uint8_t* blocks, int64_t rows, int64_t k,
                         float* out) {
  TP_CHECK(rows >= 0 && k >= 0 && k % kBlockElements == 0);
  const int64_t count = rows * (k / kBlockElements);
  const int64_t block_bytes = BlockBytes(format);
  for (int64_t i = 0; i < count; ++i) {
    DecodeBlock(format, blocks + i * block_bytes, out + i * kBlockElements);
  }
}

void QuantizedMatmulBT(const float* a, BlockFormat format, const uint8_t* b, int64_t m, int64_t n,
                       int64_t k, float* c) {
  TP_CHECK(m >= 0 && n >= 0 && k >= 0 && k % kBlockElements == 0);
  TP_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(c, c + m * n, 0.0f);
    return;
  }
  if (m <= kQuantizedGemvMaxRows) {
    Gemv(a, format, b, m, n, k, c);
  } else {
    TiledSgemm(a, format, b, m, n, k, c);
  }
}

}  // namespace tpserve::cpu
