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

constexpr int64_t kBlocksPerSuper = kSuperBlockElements / kBlockElements;

// The reference of the vector paths, and what CPUs without AVX2 run: Q4_0, Q4_1, Q8_0.
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

// The reference of the K-quants' vector paths (packed_matmul.h states the operations).
template <BlockFormat kFormat>
void KQuantTileScalar(const QuantizedActivations& a, int64_t i0, int rows_m, const PackedWeight& w,
                      int64_t group, float* out) {
  const int64_t blocks = a.blocks();
  for (int i = 0; i < rows_m; ++i) {
    float acc[kGroupRows] = {};
    for (int64_t first = 0; first < blocks; first += kBlocksPerSuper) {
      const uint8_t* super = w.super_factors(group, first);
      float scaled[kGroupRows] = {}, mins[kGroupRows] = {};
      for (int64_t blk = first; blk < first + kBlocksPerSuper; ++blk) {
        const uint8_t* record = w.record(group, blk);
        const uint8_t* scales = record + w.code_bytes();
        const int8_t* q = a.q.data() + (i0 + i) * a.k + blk * kBlockElements;
        const int64_t ab = (i0 + i) * blocks + blk;
        for (int r = 0; r < kGroupRows; ++r) {
          int32_t isum[2] = {};  // elements 0..15, 16..31
          for (int e = 0; e < kBlockElements; ++e) {
            isum[e / 16] += PackedCode(kFormat, record, r, e) * q[e];
          }
          int32_t t;
          if constexpr (kFormat == BlockFormat::kQ6_K) {
            t = (isum[0] - 32 * a.sum_lo[ab]) * static_cast<int8_t>(scales[r]) +
                (isum[1] - 32 * (a.sum[ab] - a.sum_lo[ab])) *
                    static_cast<int8_t>(scales[kGroupRows + r]);
          } else {
            int scale, min;
            KScaleAndMin(super, static_cast<int>(blk - first), r, &scale, &min);
            t = (isum[0] + isum[1]) * scale;
            mins[r] = std::fma(static_cast<float>(min), a.d_sum[ab], mins[r]);
          }
          scaled[r] = std::fma(static_cast<float>(t), a.d[ab], scaled[r]);
        }
      }
      for (int r = 0; r < kGroupRows; ++r) {
        acc[r] = std::fma(HalfToFloat(LoadU16(super + 2 * r)), scaled[r], acc[r]);
        if constexpr (kFormat != BlockFormat::kQ6_K) {
          acc[r] = std::fma(-HalfToFloat(LoadU16(super + 32 + 2 * r)), mins[r], acc[r]);
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

// The codes of a record as byte-dot operands: lane r of u[g] holds row r's codes of elements
// 4g .. 4g + 3 (Q8_0: as code + 128, vpdpbusd's unsigned side).
template <BlockFormat kFormat>
TP_TARGET_AVX512VNNI inline void UnpackZmm(const uint8_t* record, __m512i u[8]) {
  if constexpr (kFormat == BlockFormat::kQ8_0) {
    for (int g = 0; g < 8; ++g) {
      u[g] = _mm512_xor_si512(_mm512_loadu_si512(record + 64 * g),
                              _mm512_set1_epi8(static_cast<char>(0x80)));
    }
    return;
  }
  if constexpr (kFormat == BlockFormat::kQ6_K) {
    // Elements 0..15 whole; 16..31 have their top bits moved from bits 6, 7 of the chunk of the
    // element 16 before to bits 4, 5 (bits crossing from the other byte of a 16-bit lane are
    // masked off).
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    const __m512i top = _mm512_set1_epi8(0x30);
    __m512i whole[4];
    for (int g = 0; g < 4; ++g) {
      whole[g] = _mm512_loadu_si512(record + 64 * g);
      u[g] = _mm512_and_si512(whole[g], _mm512_set1_epi8(0x3F));
    }
    for (int c = 0; c < 2; ++c) {
      const __m512i raw = _mm512_loadu_si512(record + 256 + 64 * c);
      u[4 + 2 * c] = _mm512_or_si512(_mm512_and_si512(raw, nibble),
                                     _mm512_and_si512(_mm512_srli_epi16(whole[2 * c], 2), top));
      u[5 + 2 * c] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble),
                                     _mm512_and_si512(_mm512_srli_epi16(whole[2 * c + 1], 2), top));
    }
    return;
  }
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
      const __m512i moved = g <= 4 ? _mm512_slli_epi16(raw, 4 - g) : _mm512_srli_epi16(raw, g - 4);
      u[g] = _mm512_or_si512(u[g], _mm512_and_si512(moved, bit4));
    }
  }
}

// A decode step streams every weight once, and at one activation row the hardware prefetchers
// alone left the AVX-512 tiles waiting on memory: each record asks for the one 16 records ahead
// (4-9 KB; near a group's end, the next group's, which the same thread mostly takes next). Reading
// past the last record is harmless: a prefetch never faults.
constexpr int64_t kPrefetchRecords = 16;
template <BlockFormat kFormat>
inline void PrefetchAhead(const uint8_t* record) {
  const uint8_t* ahead = record + kPrefetchRecords * RecordBytes(kFormat);
  for (int64_t at = 0; at < RecordBytes(kFormat); at += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(ahead + at), _MM_HINT_T0);
  }
}

// sum + Σ over groups [g0, g1) of u[g] · the activation bytes q[4g .. 4g + 3], per lane.
TP_TARGET_AVX512VNNI inline __m512i DotZmm(const __m512i u[8], const int8_t* q, int g0, int g1,
                                           __m512i sum) {
  for (int g = g0; g < g1; ++g) {
    sum = _mm512_dpbusd_epi32(sum, u[g], _mm512_set1_epi32(LoadI32(q + 4 * g)));
  }
  return sum;
}

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
  constexpr int64_t record_bytes = RecordBytes(kFormat);
  constexpr int64_t code_bytes = CodeBytes(kFormat);
  const uint8_t* record = w.record(group, 0);
  __m512 acc[kM];
  for (int i = 0; i < kM; ++i) acc[i] = _mm512_setzero_ps();
  // Each row's activation pointers, read from the stack: kept in registers, kM rows of them would
  // not fit beside the loop's own.
  const int8_t* rows_q[kM];
  const float* rows_d[kM];
  const int32_t* rows_sum[kM];
  const float* rows_d_sum[kM];
  for (int i = 0; i < kM; ++i) {
    rows_q[i] = a.q.data() + (i0 + i) * a.k;
    rows_d[i] = a.d.data() + (i0 + i) * blocks;
    rows_sum[i] = a.sum.data() + (i0 + i) * blocks;
    rows_d_sum[i] = a.d_sum.data() + (i0 + i) * blocks;
  }
#pragma GCC unroll 1
  for (int64_t blk = 0; blk < blocks; ++blk, record += record_bytes) {
    PrefetchAhead<kFormat>(record);
    __m512i u[8];
    UnpackZmm<kFormat>(record, u);
    __m512 dw, mw;
    LoadBlockScalesZmm<kFormat>(record + code_bytes, &dw, &mw);
#pragma GCC unroll 16
    for (int i = 0; i < kM; ++i) {
      __m512i isum = DotZmm(u, rows_q[i] + blk * kBlockElements, 0, 8, _mm512_setzero_si512());
      if constexpr (kVnniZeroPoint<kFormat> != 0) {
        isum =
            _mm512_sub_epi32(isum, _mm512_set1_epi32(kVnniZeroPoint<kFormat> * rows_sum[i][blk]));
      }
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                               _mm512_mul_ps(dw, _mm512_set1_ps(rows_d[i][blk])), acc[i]);
      if constexpr (kFormat == BlockFormat::kQ4_1) {
        acc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(rows_d_sum[i][blk]), acc[i]);
      }
    }
  }
  for (int i = 0; i < kM; ++i) _mm512_storeu_ps(out + i * kGroupRows, acc[i]);
}

// Q4_K's and Q5_K's scales and mins of a super-block entry (packed_weight.h) as bytes, [16 j + r]:
// four blocks per vector.
TP_TARGET_AVX512VNNI inline void DecodeKScalesZmm(const uint8_t* super, uint8_t* scales,
                                                  uint8_t* mins) {
  const uint8_t* packed = super + kKScalesOffset;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i top = _mm512_set1_epi8(0x30);
  const __m512i high = _mm512_loadu_si512(packed + 128);
  for (int half = 0; half < 2; ++half) {  // blocks 0..3, then 4..7
    const __m512i low = _mm512_loadu_si512(packed + 64 * half);
    const __m512i scale_top = half == 0 ? _mm512_slli_epi16(high, 4) : high;
    const __m512i min_top = half == 0 ? _mm512_slli_epi16(high, 2) : _mm512_srli_epi16(high, 2);
    _mm512_storeu_si512(scales + 64 * half, _mm512_or_si512(_mm512_and_si512(low, nibble),
                                                            _mm512_and_si512(scale_top, top)));
    _mm512_storeu_si512(mins + 64 * half,
                        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), nibble),
                                        _mm512_and_si512(min_top, top)));
  }
}

// The K-quants: per block, each row's integer sum times its integer scale (one vpmulld), then one
// fp32 fma with the activation scale; the super-block's fp16 factors once per 8 blocks. Three
// accumulators per activation row: at most kKQuantRowsZmm rows per call.
template <BlockFormat kFormat, int kM>
TP_TARGET_AVX512VNNI void KQuantTileZmm(const QuantizedActivations& a, int64_t i0,
                                        const PackedWeight& w, int64_t group, float* out) {
  const int64_t blocks = a.blocks();
  constexpr int64_t record_bytes = RecordBytes(kFormat);
  constexpr int64_t code_bytes = CodeBytes(kFormat);
  const uint8_t* record = w.record(group, 0);
  __m512 acc[kM];
  for (int i = 0; i < kM; ++i) acc[i] = _mm512_setzero_ps();
  alignas(64) uint8_t block_scales[kBlocksPerSuper * kGroupRows];
  alignas(64) uint8_t block_mins[kBlocksPerSuper * kGroupRows];
  const uint8_t* super = w.super_factors(group, 0);
  for (int64_t first = 0; first < blocks; first += kBlocksPerSuper, super += SuperBytes(kFormat)) {
    if constexpr (kFormat != BlockFormat::kQ6_K) DecodeKScalesZmm(super, block_scales, block_mins);
    __m512 scaled[kM], mins[kM];
    for (int i = 0; i < kM; ++i) scaled[i] = mins[i] = _mm512_setzero_ps();
    for (int64_t blk = first; blk < first + kBlocksPerSuper; ++blk, record += record_bytes) {
      PrefetchAhead<kFormat>(record);
      __m512i u[8];
      UnpackZmm<kFormat>(record, u);
      __m512i s0, s1;
      __m512 m;
      if constexpr (kFormat == BlockFormat::kQ6_K) {
        const uint8_t* scales = record + code_bytes;
        s0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
        s1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16)));
      } else {
        const int64_t j = (blk - first) * kGroupRows;
        s0 = _mm512_cvtepu8_epi32(
            _mm_load_si128(reinterpret_cast<const __m128i*>(block_scales + j)));
        m = _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(block_mins + j))));
      }
      for (int i = 0; i < kM; ++i) {
        const int8_t* q = a.q.data() + (i0 + i) * a.k + blk * kBlockElements;
        const int64_t ab = (i0 + i) * blocks + blk;
        __m512i t;
        if constexpr (kFormat == BlockFormat::kQ6_K) {
          const __m512i lo_sum = DotZmm(u, q, 0, 4, _mm512_set1_epi32(-32 * a.sum_lo[ab]));
          const __m512i hi_sum =
              DotZmm(u, q, 4, 8, _mm512_set1_epi32(-32 * (a.sum[ab] - a.sum_lo[ab])));
          t = _mm512_add_epi32(_mm512_mullo_epi32(lo_sum, s0), _mm512_mullo_epi32(hi_sum, s1));
        } else {
          t = _mm512_mullo_epi32(DotZmm(u, q, 0, 8, _mm512_setzero_si512()), s0);
          mins[i] = _mm512_fmadd_ps(m, _mm512_set1_ps(a.d_sum[ab]), mins[i]);
        }
        scaled[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps(a.d[ab]), scaled[i]);
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(super)));
    for (int i = 0; i < kM; ++i) acc[i] = _mm512_fmadd_ps(d, scaled[i], acc[i]);
    if constexpr (kFormat != BlockFormat::kQ6_K) {
      const __m512 dmin =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(super + 32)));
      for (int i = 0; i < kM; ++i) acc[i] = _mm512_fnmadd_ps(dmin, mins[i], acc[i]);
    }
  }
  for (int i = 0; i < kM; ++i) _mm512_storeu_ps(out + i * kGroupRows, acc[i]);
}
constexpr int kKQuantRowsZmm = 4;

// AVX2 has no byte dot product into 32 bits: vpmaddubsw (unsigned x signed bytes, pairs summed
// into saturating 16 bits) then vpmaddwd by ones. A 256-bit vector holds 8 of the group's 16 rows:
// `half` picks rows 0-7 or 8-15. Q8_0's codes stay signed here (see DotYmm).
template <BlockFormat kFormat>
TP_TARGET_AVX2 inline void UnpackYmm(const uint8_t* record, int half, __m256i u[8]) {
  if constexpr (kFormat == BlockFormat::kQ8_0) {
    for (int g = 0; g < 8; ++g) {
      u[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + 64 * g + 32 * half));
    }
    return;
  }
  if constexpr (kFormat == BlockFormat::kQ6_K) {  // as UnpackZmm
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i top = _mm256_set1_epi8(0x30);
    __m256i whole[4];
    for (int g = 0; g < 4; ++g) {
      whole[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + 64 * g + 32 * half));
      u[g] = _mm256_and_si256(whole[g], _mm256_set1_epi8(0x3F));
    }
    for (int c = 0; c < 2; ++c) {
      const __m256i raw =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + 256 + 64 * c + 32 * half));
      u[4 + 2 * c] = _mm256_or_si256(_mm256_and_si256(raw, nibble),
                                     _mm256_and_si256(_mm256_srli_epi16(whole[2 * c], 2), top));
      u[5 + 2 * c] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), nibble),
                                     _mm256_and_si256(_mm256_srli_epi16(whole[2 * c + 1], 2), top));
    }
    return;
  }
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
      const __m256i moved = g <= 4 ? _mm256_slli_epi16(raw, 4 - g) : _mm256_srli_epi16(raw, g - 4);
      u[g] = _mm256_or_si256(u[g], _mm256_and_si256(moved, bit4));
    }
  }
}

// sum + Σ over groups [g0, g1) of u[g] · q[4g .. 4g + 3], per lane. Unsigned codes' pair sums
// reach 2 * 15 * 127 (Q4), 2 * 31 * 127 (Q5_K) or 2 * 63 * 127 (Q6_K): eight, four or one group
// add in 16 bits before one widening. Q8_0's signed codes go through vpsignb (|w| * sign(w) q).
template <BlockFormat kFormat>
TP_TARGET_AVX2 inline __m256i DotYmm(const __m256i u[8], const int8_t* q, int g0, int g1,
                                     __m256i sum) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (kFormat == BlockFormat::kQ8_0) {
    for (int g = g0; g < g1; ++g) {
      const __m256i x = _mm256_set1_epi32(LoadI32(q + 4 * g));
      sum = _mm256_add_epi32(
          sum, _mm256_madd_epi16(
                   _mm256_maddubs_epi16(_mm256_abs_epi8(u[g]), _mm256_sign_epi8(x, u[g])), ones));
    }
    return sum;
  }
  constexpr int kGroupsIn16Bits =
      kFormat == BlockFormat::kQ6_K ? 1 : (kFormat == BlockFormat::kQ5_K ? 4 : 8);
  for (int start = g0; start < g1; start += kGroupsIn16Bits) {
    __m256i pairs = _mm256_setzero_si256();
    for (int g = start; g < std::min(g1, start + kGroupsIn16Bits); ++g) {
      pairs = _mm256_add_epi16(pairs,
                               _mm256_maddubs_epi16(u[g], _mm256_set1_epi32(LoadI32(q + 4 * g))));
    }
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, ones));
  }
  return sum;
}

template <BlockFormat kFormat, int kM>
TP_TARGET_AVX2 void HalfTileYmm(const QuantizedActivations& a, int64_t i0, const PackedWeight& w,
                                int64_t group, int half, float* out) {
  const int64_t blocks = a.blocks();
  constexpr int64_t record_bytes = RecordBytes(kFormat);
  constexpr int64_t code_bytes = CodeBytes(kFormat);
  const uint8_t* record = w.record(group, 0);
  __m256 acc[kM];
  for (int i = 0; i < kM; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t blk = 0; blk < blocks; ++blk, record += record_bytes) {
    __m256i u[8];
    UnpackYmm<kFormat>(record, half, u);
    const uint8_t* scales = record + code_bytes + 16 * half;
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
    __m256 mw;
    if constexpr (kFormat == BlockFormat::kQ4_1) {
      mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 32)));
    }
    for (int i = 0; i < kM; ++i) {
      const int8_t* q = a.q.data() + (i0 + i) * a.k + blk * kBlockElements;
      const int64_t ab = (i0 + i) * blocks + blk;
      __m256i isum = DotYmm<kFormat>(u, q, 0, 8, _mm256_setzero_si256());
      if constexpr (kFormat == BlockFormat::kQ4_0) {
        isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(8 * a.sum[ab]));
      }
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(a.d[ab])),
                               acc[i]);
      if constexpr (kFormat == BlockFormat::kQ4_1) {
        acc[i] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a.d_sum[ab]), acc[i]);
      }
    }
  }
  for (int i = 0; i < kM; ++i) _mm256_storeu_ps(out + i * kGroupRows + 8 * half, acc[i]);
}

// DecodeKScalesZmm with 256-bit vectors: two blocks per vector.
TP_TARGET_AVX2 inline void DecodeKScalesYmm(const uint8_t* super, uint8_t* scales, uint8_t* mins) {
  const uint8_t* packed = super + kKScalesOffset;
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i top = _mm256_set1_epi8(0x30);
  for (int q = 0; q < 4; ++q) {  // blocks 2q, 2q + 1
    const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + 32 * q));
    const __m256i high =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + 128 + 32 * (q % 2)));
    const __m256i scale_top = q < 2 ? _mm256_slli_epi16(high, 4) : high;
    const __m256i min_top = q < 2 ? _mm256_slli_epi16(high, 2) : _mm256_srli_epi16(high, 2);
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(scales + 32 * q),
        _mm256_or_si256(_mm256_and_si256(low, nibble), _mm256_and_si256(scale_top, top)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(mins + 32 * q),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low, 4), nibble),
                                        _mm256_and_si256(min_top, top)));
  }
}

// KQuantTileZmm's operations, on half a group's rows.
template <BlockFormat kFormat, int kM>
TP_TARGET_AVX2 void KQuantHalfTileYmm(const QuantizedActivations& a, int64_t i0,
                                      const PackedWeight& w, int64_t group, int half, float* out) {
  const int64_t blocks = a.blocks();
  constexpr int64_t record_bytes = RecordBytes(kFormat);
  constexpr int64_t code_bytes = CodeBytes(kFormat);
  const uint8_t* record = w.record(group, 0);
  __m256 acc[kM];
  for (int i = 0; i < kM; ++i) acc[i] = _mm256_setzero_ps();
  alignas(32) uint8_t block_scales[kBlocksPerSuper * kGroupRows];
  alignas(32) uint8_t block_mins[kBlocksPerSuper * kGroupRows];
  const uint8_t* super = w.super_factors(group, 0);
  for (int64_t first = 0; first < blocks; first += kBlocksPerSuper, super += SuperBytes(kFormat)) {
    if constexpr (kFormat != BlockFormat::kQ6_K) DecodeKScalesYmm(super, block_scales, block_mins);
    __m256 scaled[kM], mins[kM];
    for (int i = 0; i < kM; ++i) scaled[i] = mins[i] = _mm256_setzero_ps();
    for (int64_t blk = first; blk < first + kBlocksPerSuper; ++blk, record += record_bytes) {
      __m256i u[8];
      UnpackYmm<kFormat>(record, half, u);
      __m256i s0, s1;
      __m256 m;
      if constexpr (kFormat == BlockFormat::kQ6_K) {
        const uint8_t* scales = record + code_bytes + 8 * half;
        s0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales)));
        s1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 16)));
      } else {
        const int64_t j = (blk - first) * kGroupRows + 8 * half;
        s0 = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block_scales + j)));
        m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block_mins + j))));
      }
      for (int i = 0; i < kM; ++i) {
        const int8_t* q = a.q.data() + (i0 + i) * a.k + blk * kBlockElements;
        const int64_t ab = (i0 + i) * blocks + blk;
        __m256i t;
        if constexpr (kFormat == BlockFormat::kQ6_K) {
          const __m256i lo_sum = DotYmm<kFormat>(u, q, 0, 4, _mm256_set1_epi32(-32 * a.sum_lo[ab]));
          const __m256i hi_sum =
              DotYmm<kFormat>(u, q, 4, 8, _mm256_set1_epi32(-32 * (a.sum[ab] - a.sum_lo[ab])));
          t = _mm256_add_epi32(_mm256_mullo_epi32(lo_sum, s0), _mm256_mullo_epi32(hi_sum, s1));
        } else {
          t = _mm256_mullo_epi32(DotYmm<kFormat>(u, q, 0, 8, _mm256_setzero_si256()), s0);
          mins[i] = _mm256_fmadd_ps(m, _mm256_set1_ps(a.d_sum[ab]), mins[i]);
        }
        scaled[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(a.d[ab]), scaled[i]);
      }
    }
    const __m256 d =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(super + 16 * half)));
    for (int i = 0; i < kM; ++i) acc[i] = _mm256_fmadd_ps(d, scaled[i], acc[i]);
    if constexpr (kFormat != BlockFormat::kQ6_K) {
      const __m256 dmin = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(super + 32 + 16 * half)));
      for (int i = 0; i < kM; ++i) acc[i] = _mm256_fnmadd_ps(dmin, mins[i], acc[i]);
    }
  }
  for (int i = 0; i < kM; ++i) _mm256_storeu_ps(out + i * kGroupRows + 8 * half, acc[i]);
}

// Sixteen registers: four activation rows at a time (the K-quants' three accumulators per row:
// two).
template <BlockFormat kFormat>
void TileYmm(const QuantizedActivations& a, int64_t i0, int rows_m, const PackedWeight& w,
             int64_t group, float* out) {
  constexpr int kRows = IsKQuant(kFormat) ? 2 : 4;
  for (int i = 0; i < rows_m; i += kRows) {
    const int rows = std::min(kRows, rows_m - i);
    for (int half = 0; half < 2; ++half) {
      WithRows(rows, [&]<int kM>() {
        if constexpr (kM <= kRows) {
          if constexpr (IsKQuant(kFormat)) {
            KQuantHalfTileYmm<kFormat, kM>(a, i0 + i, w, group, half, out + i * kGroupRows);
          } else {
            HalfTileYmm<kFormat, kM>(a, i0 + i, w, group, half, out + i * kGroupRows);
          }
        }
      });
    }
  }
}

// The VNNI tiles, up to 16 activation rows per call (K-quants kKQuantRowsZmm).
template <BlockFormat kFormat>
void TileZmmRows(const QuantizedActivations& a, int64_t i0, int rows_m, const PackedWeight& w,
                 int64_t group, float* out) {
  if constexpr (IsKQuant(kFormat)) {
    for (int i = 0; i < rows_m; i += kKQuantRowsZmm) {
      WithRows(std::min(kKQuantRowsZmm, rows_m - i), [&]<int kM>() {
        if constexpr (kM <= kKQuantRowsZmm) {
          KQuantTileZmm<kFormat, kM>(a, i0 + i, w, group, out + i * kGroupRows);
        }
      });
    }
  } else {
    WithRows(rows_m, [&]<int kM>() { TileZmm<kFormat, kM>(a, i0, w, group, out); });
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
      return TileZmmRows<kFormat>(a, i0, rows_m, w, group, out);
    case PackedIsa::kAvx2:
      return TileYmm<kFormat>(a, i0, rows_m, w, group, out);
    case PackedIsa::kPortable:
      break;
  }
#endif
  if constexpr (IsKQuant(kFormat)) {
    KQuantTileScalar<kFormat>(a, i0, rows_m, w, group, out);
  } else {
    TileScalar<kFormat>(a, i0, rows_m, w, group, out);
  }
}

// Below this many activation rows a tile goes through VNNI even where AMX is available: one
// TDPBSSD costs the same for 1 row as for 16, and the unpacked weight tiles must be written
// first.
constexpr int kAmxMinRows = 4;

// 16-bit activations: rows rounded and multiplied per call of the float PackedMatmulBT, 8 tiles of
// 16 halves.
constexpr int64_t kSplitRows = 64;

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
                    float* c, ActivationBits bits) {
  thread_local QuantizedActivations quantized;
  if (bits == ActivationBits::k8) {
    QuantizeActivations(a, m, w.cols, &quantized);
    return PackedMatmulBT(quantized, w, first, count, c, BestPackedIsa());
  }
  // A row's halves are adjacent, so one tile of weight codes serves both. Rows go kSplitRows at a
  // time so that the halves' products stay a bounded buffer beside c (a prompt's logits over the
  // vocabulary would otherwise double).
  thread_local std::vector<float> halves;
  for (int64_t i0 = 0; i0 < m; i0 += kSplitRows) {
    const int64_t rows = std::min(kSplitRows, m - i0);
    QuantizeActivations16(a + i0 * w.cols, rows, w.cols, &quantized);
    halves.resize(2 * rows * count);
    PackedMatmulBT(quantized, w, first, count, halves.data(), BestPackedIsa());
    for (int64_t i = 0; i < rows; ++i) {
      const float* high = halves.data() + 2 * i * count;
      const float* low = high + count;
      float* out = c + (i0 + i) * count;
      for (int64_t j = 0; j < count; ++j) out[j] = high[j] + low[j];
    }
  }
}

}  // namespace tpserve::cpu
