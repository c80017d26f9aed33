#include "kernels/cpu/packed_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/half.h"
#include "kernels/cpu/packed_matmul_amx.h"
#include "kernels/cpu/packed_tile.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/x86_intrinsics.h"

// Work is split by groups of 16 weight rows (threads take groups) and, within a group, tiles of
// up to 16 activation rows: a tile function writes out[i * 16 + r], the result of activation row
// i0 + i and weight row r of the group, for every block in order. Each output lane only ever sees
// its own row's operations, so tile shapes never change a result.

namespace tpserve::cpu {
namespace {

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The reference of the vector paths, and what CPUs without AVX2 run.
template <BlockFormat kFormat>
void TileScalar(const QuantizedActivations& a, int64_t i0, int rows_m, const PackedWeight& w,
                int64_t group, float* out) {
  const int64_t blocks = a.blocks();
  for (int i = 0; i < rows_m; ++i) {
    float acc[kGroupRows] = {};
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const uint8_t* record = w.record(group, blk);
      const uint8_t* scales = record + w.code_bytes();
      const int8_t* q = a.q.data() + (i0 + i) * a.k + blk * kBlockElements;
      const int64_t ab = (i0 + i) * blocks + blk;
      for (int r = 0; r < kGroupRows; ++r) {
        if constexpr (IsKQuant(kFormat)) {
          const uint8_t* super = w.super_factors(group, blk);
          const float d = HalfToFloat(LoadU16(super + 2 * r));
          int32_t isum[2] = {};  // elements 0..15, 16..31
          for (int e = 0; e < kBlockElements; ++e) {
            isum[e / 16] += PackedCode(kFormat, record, r, e) * q[e];
          }
          if constexpr (kFormat == BlockFormat::kQ4_K || kFormat == BlockFormat::kQ5_K) {
            const float dw = d * static_cast<float>(scales[r]);
            const float mw = HalfToFloat(LoadU16(super + 32 + 2 * r)) *
                             static_cast<float>(scales[kGroupRows + r]);
            acc[r] = std::fma(static_cast<float>(isum[0] + isum[1]), dw * a.d[ab], acc[r]);
            acc[r] = std::fma(-mw, a.d_sum[ab], acc[r]);
          } else {
            const int32_t sums[2] = {a.sum_lo[ab], a.sum[ab] - a.sum_lo[ab]};
            for (int h = 0; h < 2; ++h) {
              const float dw =
                  d * static_cast<float>(static_cast<int8_t>(scales[kGroupRows * h + r]));
              acc[r] = std::fma(static_cast<float>(isum[h] - 32 * sums[h]), dw * a.d[ab], acc[r]);
            }
          }
          continue;
        }
        int32_t isum = 0;
        for (int e = 0; e < kBlockElements; ++e) isum += PackedCode(kFormat, record, r, e) * q[e];
        if constexpr (kFormat == BlockFormat::kQ4_0) isum -= 8 * a.sum[ab];
        const float dw = HalfToFloat(LoadU16(scales + 2 * r));
        acc[r] = std::fma(static_cast<float>(isum), dw * a.d[ab], acc[r]);
        if constexpr (kFormat == BlockFormat::kQ4_1) {
          acc[r] =
              std::fma(HalfToFloat(LoadU16(scales + 2 * (kGroupRows + r))), a.d_sum[ab], acc[r]);
        }
      }
    }
    std::copy(acc, acc + kGroupRows, out + i * kGroupRows);
  }
}

#if defined(__x86_64__)
#define TP_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TP_TARGET_AVX512VNNI \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

// vpdpbusd multiplies unsigned by signed bytes: Q8_0's signed codes enter as code + 128 (xor 0x80)
// and Q4_0's codes as they are (0..15); the integer sum is corrected by zero_point * Σ q_x.
template <BlockFormat kFormat>
constexpr int32_t kVnniZeroPoint = kFormat == BlockFormat::kQ8_0
                                       ? 128
                                       : (kFormat == BlockFormat::kQ4_0 ? 8 : 0);

template <BlockFormat kFormat, int kM>
TP_TARGET_AVX512VNNI void TileZmm(const QuantizedActivations& a, int64_t i0, const PackedWeight& w,
                                  int64_t group, float* out) {
  const int64_t blocks = a.blocks();
  const int64_t record_bytes = w.record_bytes();
  const uint8_t* record = w.record(group, 0);
  __m512 acc[kM];
  for (int i = 0; i < kM; ++i) acc[i] = _mm512_setzero_ps();
  __m512 d, dmin;  // K-quants: the super-block's factors, loaded once per 8 blocks
  for (int64_t blk = 0; blk < blocks; ++blk, record += record_bytes) {
    if constexpr (IsKQuant(kFormat)) {
      if (blk % (kSuperBlockElements / kBlockElements) == 0) {
        const uint8_t* super = w.super_factors(group, blk);
        d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(super)));
        if constexpr (kFormat == BlockFormat::kQ4_K || kFormat == BlockFormat::kQ5_K) {
          dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(super + 32)));
        }
      }
    }
    __m512i u[8];
    if constexpr (kFormat == BlockFormat::kQ8_0) {
      for (int g = 0; g < 8; ++g) {
        u[g] = _mm512_xor_si512(_mm512_loadu_si512(record + 64 * g),
                                _mm512_set1_epi8(static_cast<char>(0x80)));
      }
    } else {
      const __m512i mask = _mm512_set1_epi8(0x0F);
      for (int p = 0; p < 4; ++p) {
        const __m512i raw = _mm512_loadu_si512(record + 64 * p);
        u[2 * p] = _mm512_and_si512(raw, mask);
        u[2 * p + 1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask);
      }
      if constexpr (kFormat == BlockFormat::kQ5_K) {
        // Bit g moved to bit 4 of its byte: bits crossing into the other byte are masked off.
        const __m512i raw = _mm512_loadu_si512(record + 256);
        const __m512i bit4 = _mm512_set1_epi8(0x10);
        for (int g = 0; g < 8; ++g) {
          const __m512i moved =
              g <= 4 ? _mm512_slli_epi16(raw, 4 - g) : _mm512_srli_epi16(raw, g - 4);
          u[g] = _mm512_or_si512(u[g], _mm512_and_si512(moved, bit4));
        }
      }
      if constexpr (kFormat == BlockFormat::kQ6_K) {
        for (int h = 0; h < 2; ++h) {
          // Bits 2k, 2k + 1 moved to bits 4, 5 of their byte (see Q5_K above).
          const __m512i raw = _mm512_loadu_si512(record + 256 + 64 * h);
          const __m512i bits45 = _mm512_set1_epi8(0x30);
          for (int k = 0; k < 4; ++k) {
            const __m512i moved =
                k <= 2 ? _mm512_slli_epi16(raw, 4 - 2 * k) : _mm512_srli_epi16(raw, 2 * k - 4);
            u[4 * h + k] = _mm512_or_si512(u[4 * h + k], _mm512_and_si512(moved, bits45));
          }
        }
      }
    }
    const uint8_t* scales = record + w.code_bytes();
    __m512 dw, mw, dw_hi;
    if constexpr (IsKQuant(kFormat)) {
      // The block's factors, exact in fp32: an fp16 times a 6- or 8-bit integer.
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16));
      if constexpr (kFormat == BlockFormat::kQ4_K || kFormat == BlockFormat::kQ5_K) {
        dw = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)));
        mw = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)));
      } else {
        dw = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)));
        dw_hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)));
      }
    } else {
      dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
      if constexpr (kFormat == BlockFormat::kQ4_1) {
        mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 32)));
      }
    }
    for (int i = 0; i < kM; ++i) {
      const int8_t* q = a.q.data() + (i0 + i) * a.k + blk * kBlockElements;
      const int64_t ab = (i0 + i) * blocks + blk;
      if constexpr (kFormat == BlockFormat::kQ6_K) {
        __m512i half_sums[2];
        const int32_t sums[2] = {a.sum_lo[ab], a.sum[ab] - a.sum_lo[ab]};
        for (int h = 0; h < 2; ++h) {
          __m512i isum = _mm512_set1_epi32(-32 * sums[h]);
          for (int g = 4 * h; g < 4 * h + 4; ++g) {
            isum = _mm512_dpbusd_epi32(isum, u[g], _mm512_set1_epi32(LoadI32(q + 4 * g)));
          }
          half_sums[h] = isum;
        }
        const __m512 dx = _mm512_set1_ps(a.d[ab]);
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(half_sums[0]), _mm512_mul_ps(dw, dx), acc[i]);
        acc[i] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(half_sums[1]), _mm512_mul_ps(dw_hi, dx), acc[i]);
        continue;
      }
      __m512i isum = _mm512_setzero_si512();
      for (int g = 0; g < 8; ++g) {
        isum = _mm512_dpbusd_epi32(isum, u[g], _mm512_set1_epi32(LoadI32(q + 4 * g)));
      }
      if constexpr (kVnniZeroPoint<kFormat> != 0) {
        isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(kVnniZeroPoint<kFormat> * a.sum[ab]));
      }
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(a.d[ab])),
                               acc[i]);
      if constexpr (kFormat == BlockFormat::kQ4_1) {
        acc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a.d_sum[ab]), acc[i]);
      } else if constexpr (kFormat == BlockFormat::kQ4_K || kFormat == BlockFormat::kQ5_K) {
        acc[i] = _mm512_fnmadd_ps(mw, _mm512_set1_ps(a.d_sum[ab]), acc[i]);
      }
    }
  }
  for (int i = 0; i < kM; ++i) _mm512_storeu_ps(out + i * kGroupRows, acc[i]);
}

// AVX2 has no byte dot product into 32 bits: vpmaddubsw (unsigned x signed bytes, pairs summed
// into saturating 16 bits) then vpmaddwd by ones. Q4 codes <= 15 keep eight groups' pair sums
// under 8 * 2 * 15 * 127 = 30480, so they add in 16 bits before one widening; Q8_0 codes are
// signed and go through vpsignb (|w| * sign(w) q) one group at a time. A 256-bit vector holds 8 of
// the group's 16 rows: `half` picks rows 0-7 or 8-15.
template <BlockFormat kFormat, int kM>
TP_TARGET_AVX2 void HalfTileYmm(const QuantizedActivations& a, int64_t i0, const PackedWeight& w,
                                int64_t group, int half, float* out) {
  const int64_t blocks = a.blocks();
  const int64_t record_bytes = w.record_bytes();
  const uint8_t* record = w.record(group, 0);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kM];
  for (int i = 0; i < kM; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t blk = 0; blk < blocks; ++blk, record += record_bytes) {
    __m256i u[8];
    if constexpr (kFormat == BlockFormat::kQ8_0) {
      for (int g = 0; g < 8; ++g) {
        u[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + 64 * g + 32 * half));
      }
    } else {
      const __m256i mask = _mm256_set1_epi8(0x0F);
      for (int p = 0; p < 4; ++p) {
        const __m256i raw =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + 64 * p + 32 * half));
        u[2 * p] = _mm256_and_si256(raw, mask);
        u[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
      }
      if constexpr (kFormat == BlockFormat::kQ5_K) {
        const __m256i raw =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + 256 + 32 * half));
        const __m256i bit4 = _mm256_set1_epi8(0x10);
        for (int g = 0; g < 8; ++g) {
          const __m256i moved =
              g <= 4 ? _mm256_slli_epi16(raw, 4 - g) : _mm256_srli_epi16(raw, g - 4);
          u[g] = _mm256_or_si256(u[g], _mm256_and_si256(moved, bit4));
        }
      }
      if constexpr (kFormat == BlockFormat::kQ6_K) {
        for (int h = 0; h < 2; ++h) {
          const __m256i raw = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(record + 256 + 64 * h + 32 * half));
          const __m256i bits45 = _mm256_set1_epi8(0x30);
          for (int k = 0; k < 4; ++k) {
            const __m256i moved =
                k <= 2 ? _mm256_slli_epi16(raw, 4 - 2 * k) : _mm256_srli_epi16(raw, 2 * k - 4);
            u[4 * h + k] = _mm256_or_si256(u[4 * h + k], _mm256_and_si256(moved, bits45));
          }
        }
      }
    }
    __m256 dw, mw, dw_hi;
    if constexpr (IsKQuant(kFormat)) {
      // Rows 8 * half .. 8 * half + 7 of the block's factors, exact in fp32 (see TileZmm).
      const uint8_t* scales = record + w.code_bytes() + 8 * half;
      const uint8_t* super = w.super_factors(group, blk) + 16 * half;
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(super)));
      const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales));
      const __m128i hi = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 16));
      if constexpr (kFormat == BlockFormat::kQ4_K || kFormat == BlockFormat::kQ5_K) {
        const __m256 dmin =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(super + 32)));
        dw = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)));
        mw = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)));
      } else {
        dw = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)));
        dw_hi = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)));
      }
    } else {
      const uint8_t* scales = record + w.code_bytes() + 16 * half;
      dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
      if constexpr (kFormat == BlockFormat::kQ4_1) {
        mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 32)));
      }
    }
    for (int i = 0; i < kM; ++i) {
      const int8_t* q = a.q.data() + (i0 + i) * a.k + blk * kBlockElements;
      const int64_t ab = (i0 + i) * blocks + blk;
      if constexpr (kFormat == BlockFormat::kQ6_K) {
        // Codes up to 63 make pair sums up to 2 * 63 * 127 = 16,002: each group widens before the
        // next adds.
        __m256i half_sums[2];
        const int32_t sums[2] = {a.sum_lo[ab], a.sum[ab] - a.sum_lo[ab]};
        for (int h = 0; h < 2; ++h) {
          __m256i isum = _mm256_set1_epi32(-32 * sums[h]);
          for (int g = 4 * h; g < 4 * h + 4; ++g) {
            isum = _mm256_add_epi32(
                isum, _mm256_madd_epi16(
                          _mm256_maddubs_epi16(u[g], _mm256_set1_epi32(LoadI32(q + 4 * g))), ones));
          }
          half_sums[h] = isum;
        }
        const __m256 dx = _mm256_set1_ps(a.d[ab]);
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(half_sums[0]), _mm256_mul_ps(dw, dx), acc[i]);
        acc[i] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(half_sums[1]), _mm256_mul_ps(dw_hi, dx), acc[i]);
        continue;
      }
      __m256i isum;
      if constexpr (kFormat == BlockFormat::kQ8_0) {
        isum = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g) {
          const __m256i x = _mm256_set1_epi32(LoadI32(q + 4 * g));
          isum = _mm256_add_epi32(
              isum,
              _mm256_madd_epi16(
                  _mm256_maddubs_epi16(_mm256_abs_epi8(u[g]), _mm256_sign_epi8(x, u[g])), ones));
        }
      } else {
        // Pair sums reach 2 * 15 * 127 (Q4) or 2 * 31 * 127 (Q5_K): eight, or four, add in 16 bits.
        constexpr int kGroupsIn16Bits = kFormat == BlockFormat::kQ5_K ? 4 : 8;
        isum = _mm256_setzero_si256();
        for (int g0 = 0; g0 < 8; g0 += kGroupsIn16Bits) {
          __m256i pairs = _mm256_setzero_si256();
          for (int g = g0; g < g0 + kGroupsIn16Bits; ++g) {
            pairs = _mm256_add_epi16(
                pairs, _mm256_maddubs_epi16(u[g], _mm256_set1_epi32(LoadI32(q + 4 * g))));
          }
          isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, ones));
        }
        if constexpr (kFormat == BlockFormat::kQ4_0) {
          isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(8 * a.sum[ab]));
        }
      }
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(a.d[ab])),
                               acc[i]);
      if constexpr (kFormat == BlockFormat::kQ4_1) {
        acc[i] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a.d_sum[ab]), acc[i]);
      } else if constexpr (kFormat == BlockFormat::kQ4_K || kFormat == BlockFormat::kQ5_K) {
        acc[i] = _mm256_fnmadd_ps(mw, _mm256_set1_ps(a.d_sum[ab]), acc[i]);
      }
    }
  }
  for (int i = 0; i < kM; ++i) _mm256_storeu_ps(out + i * kGroupRows + 8 * half, acc[i]);
}

// Sixteen registers: four activation rows at a time.
template <BlockFormat kFormat>
void TileYmm(const QuantizedActivations& a, int64_t i0, int rows_m, const PackedWeight& w,
             int64_t group, float* out) {
  constexpr int kRows = 4;
  for (int i = 0; i < rows_m; i += kRows) {
    const int rows = std::min(kRows, rows_m - i);
    for (int half = 0; half < 2; ++half) {
      WithRows(rows, [&]<int kM>() {
        if constexpr (kM <= kRows) {
          HalfTileYmm<kFormat, kM>(a, i0 + i, w, group, half, out + i * kGroupRows);
        }
      });
    }
  }
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has;
}

bool HasAvx512Vnni() {
  static const bool has =
      HasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni");
  return has;
}
#endif  // __x86_64__

template <BlockFormat kFormat>
void RunTile(PackedIsa isa, const QuantizedActivations& a, int64_t i0, int rows_m,
             const PackedWeight& w, int64_t group, float* out) {
#if defined(__x86_64__)
  switch (isa) {
    case PackedIsa::kAmx:
    case PackedIsa::kAvx512Vnni:
      return WithRows(rows_m, [&]<int kM>() { TileZmm<kFormat, kM>(a, i0, w, group, out); });
    case PackedIsa::kAvx2:
      return TileYmm<kFormat>(a, i0, rows_m, w, group, out);
    case PackedIsa::kPortable:
      break;
  }
#endif
  TileScalar<kFormat>(a, i0, rows_m, w, group, out);
}

// Below this many activation rows a tile goes through VNNI even where AMX is available: one
// TDPBSSD costs the same for 1 row as for 16, and the unpacked weight tiles must be written
// first.
constexpr int kAmxMinRows = 4;

template <BlockFormat kFormat>
void Product(PackedIsa isa, const QuantizedActivations& a, const PackedWeight& w, int64_t first,
             int64_t count, float* c) {
  const int64_t m = a.rows;
  const int64_t first_group = first / kGroupRows;
  const int64_t end_group = (first + count + kGroupRows - 1) / kGroupRows;
  // The AMX tiles take one fp16 scale per block and row: the K-quants go through VNNI.
  const bool amx = isa == PackedIsa::kAmx && m >= kAmxMinRows && !IsKQuant(kFormat);
  const int64_t groups = end_group - first_group;
  ParallelFor(groups, FewChunksPerThread(groups), [&](int64_t begin, int64_t end) {
    alignas(64) float out[kGroupRows * kGroupRows];
    thread_local std::vector<uint8_t> scratch;  // the pool's threads live on: no steady allocation
    for (int64_t group = first_group + begin; group < first_group + end; ++group) {
      const uint8_t* weight_tiles = amx ? AmxWeightTiles(w, group, &scratch) : nullptr;
      const int64_t lo = std::max(first, group * kGroupRows);
      const int64_t hi = std::min(first + count, (group + 1) * kGroupRows);
      for (int64_t i0 = 0; i0 < m; i0 += kGroupRows) {
        const int rows_m = static_cast<int>(std::min<int64_t>(kGroupRows, m - i0));
        if (amx && rows_m >= kAmxMinRows) {
          AmxTile(a, i0, rows_m, w, group, weight_tiles, out);
        } else {
          RunTile<kFormat>(isa, a, i0, rows_m, w, group, out);
        }
        for (int i = 0; i < rows_m; ++i) {
          std::memcpy(c + (i0 + i) * count + (lo - first),
                      out + i * kGroupRows + (lo - group * kGroupRows), (hi - lo) * sizeof(float));
        }
      }
    }
  });
}

}  // namespace

bool PackedIsaSupported(PackedIsa isa) {
  switch (isa) {
    case PackedIsa::kPortable:
      return true;
#if defined(__x86_64__)
    case PackedIsa::kAvx2:
      return HasAvx2();
    case PackedIsa::kAvx512Vnni:
      return HasAvx512Vnni();
    case PackedIsa::kAmx:
      return HasAvx512Vnni() && AmxAvailable();
#else
    default:
      return false;
#endif
  }
  return false;
}

PackedIsa BestPackedIsa() {
  static const PackedIsa best = [] {
    for (PackedIsa isa : {PackedIsa::kAmx, PackedIsa::kAvx512Vnni, PackedIsa::kAvx2}) {
      if (PackedIsaSupported(isa)) return isa;
    }
    return PackedIsa::kPortable;
  }();
  return best;
}

const char* PackedIsaName(PackedIsa isa) {
  switch (isa) {
    case PackedIsa::kPortable:
      return "portable";
    case PackedIsa::kAvx2:
      return "avx2";
    case PackedIsa::kAvx512Vnni:
      return "avx512-vnni";
    case PackedIsa::kAmx:
      return "amx";
  }
  return "?";
}

void PackedMatmulBT(const QuantizedActivations& a, const PackedWeight& w, int64_t first,
                    int64_t count, float* c, PackedIsa isa) {
  TP_CHECK(a.k == w.cols);
  TP_CHECK(first >= 0 && count >= 0 && first + count <= w.rows);
  TP_CHECK(PackedIsaSupported(isa));
  if (a.rows == 0 || count == 0) return;
  switch (w.format) {
    case BlockFormat::kQ4_0:
      return Product<BlockFormat::kQ4_0>(isa, a, w, first, count, c);
    case BlockFormat::kQ4_1:
      return Product<BlockFormat::kQ4_1>(isa, a, w, first, count, c);
    case BlockFormat::kQ8_0:
      return Product<BlockFormat::kQ8_0>(isa, a, w, first, count, c);
    case BlockFormat::kQ4_K:
      return Product<BlockFormat::kQ4_K>(isa, a, w, first, count, c);
    case BlockFormat::kQ5_K:
      return Product<BlockFormat::kQ5_K>(isa, a, w, first, count, c);
    case BlockFormat::kQ6_K:
      return Product<BlockFormat::kQ6_K>(isa, a, w, first, count, c);
  }
}

void PackedMatmulBT(const float* a, int64_t m, const PackedWeight& w, int64_t first, int64_t count,
                    float* c) {
  thread_local QuantizedActivations quantized;
  QuantizeActivations(a, m, w.cols, &quantized);
  PackedMatmulBT(quantized, w, first, count, c, BestPackedIsa());
}

}  // namespace tpserve::cpu
