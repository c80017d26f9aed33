#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/fp8_e4m3.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/vector_exp.h"
#include "kernels/cpu/vector_ops.h"
#include "kernels/cpu/x86_intrinsics.h"

namespace tpserve::cpu {
namespace {

bool Fp8(const PagedAttentionParams& p) { return p.k_cache_fp8 != nullptr; }

// The head_dim values of K (or V) at element `offset` of the cache: in place in an fp32 cache,
// decoded into `row` from an FP8 one, times the head's `scale`.
const float* CacheRow(const PagedAttentionParams& p, const float* cache, const uint8_t* fp8,
                      float scale, int64_t offset, float* row) {
  if (fp8 == nullptr) return cache + offset;
  for (int64_t d = 0; d < p.head_dim; ++d) row[d] = FromE4m3(fp8[offset + d]) * scale;
  return row;
}

// Scratch floats the portable path needs per item.
int64_t ScratchFloats(const PagedAttentionParams& p, int64_t group) {
  return group * (p.block_size + p.head_dim + 2) + p.head_dim;
}

// Attention of the `group` query heads that share KV head `kv_head`, for one token, over cache
// positions [0, num_positions). Each K and V row is loaded once for the whole group.
//   q:       [group, head_dim], the group's query heads (adjacent in q)
//   table:   the sequence's block ids
//   scratch: [ScratchFloats] floats
//   out:     [group, head_dim]
void AttendGroup(const PagedAttentionParams& p, int64_t group, const float* q, const int32_t* table,
                 int64_t first_position, int64_t num_positions, int64_t kv_head, float* scratch,
                 float* out) {
  const int64_t head_dim = p.head_dim;
  const int64_t block_size = p.block_size;
  const int64_t slot_stride = p.num_kv_heads * head_dim;  // elements between consecutive slots
  float* scores = scratch;                                // [group, block_size]
  float* acc = scores + group * block_size;               // [group, head_dim], unnormalized output
  float* running_max = acc + group * head_dim;            // [group]
  float* running_sum = running_max + group;  // [group], sum of exp(score - running_max)
  float* row = running_sum + group;          // [head_dim], an FP8 row decoded
  std::fill(acc, acc + group * head_dim, 0.0f);
  std::fill(running_max, running_max + group, -std::numeric_limits<float>::infinity());
  std::fill(running_sum, running_sum + group, 0.0f);
  const float k_scale = Fp8(p) ? p.k_scales[kv_head] : 1.0f;
  const float v_scale = Fp8(p) ? p.v_scales[kv_head] : 1.0f;

  for (int64_t b = first_position / block_size; b * block_size < num_positions; ++b) {
    const int64_t in_block = std::min(block_size, num_positions - b * block_size);
    const int64_t start = std::max<int64_t>(0, first_position - b * block_size);
    const int64_t base = int64_t{table[b]} * block_size * slot_stride + kv_head * head_dim;

    for (int64_t j = start; j < in_block; ++j) {
      const float* kj = CacheRow(p, p.k_cache, p.k_cache_fp8, k_scale, base + j * slot_stride, row);
      for (int64_t h = 0; h < group; ++h) {
        scores[h * block_size + j] = Dot(q + h * head_dim, kj, head_dim) * p.scale;
      }
    }
    for (int64_t h = 0; h < group; ++h) {
      float* s = scores + h * block_size;
      const float block_max = *std::max_element(s + start, s + in_block);
      if (block_max > running_max[h]) {
        // Rescale what was accumulated under the old maximum (exp(-inf) = 0 on the first block).
        const float correction = std::exp(running_max[h] - block_max);
        running_sum[h] *= correction;
        Scale(correction, acc + h * head_dim, acc + h * head_dim, head_dim);
        running_max[h] = block_max;
      }
      for (int64_t j = start; j < in_block; ++j) {
        s[j] = std::exp(s[j] - running_max[h]);  // the score becomes its softmax weight
        running_sum[h] += s[j];
      }
    }
    for (int64_t j = start; j < in_block; ++j) {
      const float* vj = CacheRow(p, p.v_cache, p.v_cache_fp8, v_scale, base + j * slot_stride, row);
      for (int64_t h = 0; h < group; ++h) {
        Axpy(scores[h * block_size + j], vj, acc + h * head_dim, head_dim);
      }
    }
  }
  for (int64_t h = 0; h < group; ++h) {
    Scale(1.0f / running_sum[h], acc + h * head_dim, out + h * head_dim, head_dim);
  }
}

#if defined(__x86_64__)
#define TP_TARGET_AVX512 __attribute__((target("avx2,fma,avx512f,avx512dq,avx512bw,avx512vl")))

// FromE4m3(codes[i]) * scale for 16 codes: the same values as the scalar decode, NaN included.
TP_TARGET_AVX512 inline __m512 DecodeE4m3x16(const uint8_t* codes, __m512 scale) {
  const __m512i code =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  const __m512i magnitude = _mm512_and_si512(code, _mm512_set1_epi32(0x7F));
  // Normals: exponent and mantissa moved into fp32's fields, the bias raised from 7 to 127.
  const __m512 normal = _mm512_castsi512_ps(
      _mm512_add_epi32(_mm512_slli_epi32(magnitude, 20), _mm512_set1_epi32((127 - 7) << 23)));
  const __m512 subnormal = _mm512_mul_ps(_mm512_cvtepi32_ps(magnitude), _mm512_set1_ps(0x1p-9f));
  __m512 value = _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(magnitude, _mm512_set1_epi32(8)),
                                      normal, subnormal);
  value = _mm512_mask_mov_ps(value, _mm512_cmpeq_epi32_mask(magnitude, _mm512_set1_epi32(0x7F)),
                             _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(code, _mm512_set1_epi32(0x80)), 24);
  value = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(value), sign));
  return _mm512_mul_ps(value, scale);
}

// 16 values of K (or V) at element `offset` of an fp32 or (kFp8) FP8 cache.
template <bool kFp8>
TP_TARGET_AVX512 inline __m512 Load16(const float* cache, const uint8_t* fp8, int64_t offset,
                                      __m512 scale) {
  if constexpr (kFp8) {
    return DecodeE4m3x16(fp8 + offset, scale);
  } else {
    return _mm512_loadu_ps(cache + offset);
  }
}

// AttendGroup on 512-bit vectors for kChunks * 16 = head_dim and kGroup query heads per KV head:
// the group's queries and running outputs stay in registers, and positions go 16 at a time, so
// one vector exponential makes 16 softmax weights. The online softmax is the scalar path's, in
// steps of 16 positions instead of one block. kFp8: the cache holds E4M3 codes, decoded as they
// are loaded.
template <int kChunks, int kGroup, bool kFp8>
TP_TARGET_AVX512 void AttendGroupAvx512(const PagedAttentionParams& p, const float* q,
                                        const int32_t* table, int64_t first_position,
                                        int64_t num_positions, int64_t kv_head, float* out) {
  const __m512 k_scale = _mm512_set1_ps(kFp8 ? p.k_scales[kv_head] : 1.0f);
  const __m512 v_scale = _mm512_set1_ps(kFp8 ? p.v_scales[kv_head] : 1.0f);
  const int64_t block_size = p.block_size;
  const int64_t slot_stride = p.num_kv_heads * kChunks * 16;
  __m512 qv[kGroup][kChunks];
  __m512 acc[kGroup][kChunks];
  float running_max[kGroup];
  float running_sum[kGroup];
  for (int h = 0; h < kGroup; ++h) {
    for (int c = 0; c < kChunks; ++c) {
      qv[h][c] = _mm512_loadu_ps(q + (h * kChunks + c) * 16);
      acc[h][c] = _mm512_setzero_ps();
    }
    running_max[h] = -std::numeric_limits<float>::infinity();
    running_sum[h] = 0.0f;
  }
  alignas(64) float weights[kGroup][16];
  for (int64_t b = first_position / block_size; b * block_size < num_positions; ++b) {
    const int64_t in_block = std::min(block_size, num_positions - b * block_size);
    const int64_t base = int64_t{table[b]} * block_size * slot_stride + kv_head * kChunks * 16;
    for (int64_t j0 = std::max<int64_t>(0, first_position - b * block_size); j0 < in_block;
         j0 += 16) {
      const int n = static_cast<int>(std::min<int64_t>(16, in_block - j0));
      const int64_t first = base + j0 * slot_stride;
      for (int j = 0; j < n; ++j) {
        __m512 kv[kChunks];
        for (int c = 0; c < kChunks; ++c) {
          kv[c] = Load16<kFp8>(p.k_cache, p.k_cache_fp8, first + j * slot_stride + c * 16, k_scale);
        }
        for (int h = 0; h < kGroup; ++h) {
          __m512 dot = _mm512_mul_ps(qv[h][0], kv[0]);
          for (int c = 1; c < kChunks; ++c) dot = _mm512_fmadd_ps(qv[h][c], kv[c], dot);
          weights[h][j] = _mm512_reduce_add_ps(dot) * p.scale;
        }
      }
      const __mmask16 valid = static_cast<__mmask16>((1u << n) - 1);
      for (int h = 0; h < kGroup; ++h) {
        const __m512 scores = _mm512_mask_loadu_ps(
            _mm512_set1_ps(-std::numeric_limits<float>::infinity()), valid, weights[h]);
        const float chunk_max = _mm512_reduce_max_ps(scores);
        if (chunk_max > running_max[h]) {
          // Rescale what was accumulated under the old maximum (exp(-inf) = 0 at the start).
          const __m512 correction = _mm512_set1_ps(std::exp(running_max[h] - chunk_max));
          running_sum[h] *= _mm512_cvtss_f32(correction);
          for (int c = 0; c < kChunks; ++c) acc[h][c] = _mm512_mul_ps(acc[h][c], correction);
          running_max[h] = chunk_max;
        }
        const __m512 w = _mm512_maskz_mov_ps(
            valid, ExpNonPositive(_mm512_sub_ps(scores, _mm512_set1_ps(running_max[h]))));
        running_sum[h] += _mm512_reduce_add_ps(w);
        _mm512_store_ps(weights[h], w);
      }
      for (int j = 0; j < n; ++j) {
        __m512 vv[kChunks];
        for (int c = 0; c < kChunks; ++c) {
          vv[c] = Load16<kFp8>(p.v_cache, p.v_cache_fp8, first + j * slot_stride + c * 16, v_scale);
        }
        for (int h = 0; h < kGroup; ++h) {
          const __m512 wj = _mm512_set1_ps(weights[h][j]);
          for (int c = 0; c < kChunks; ++c) acc[h][c] = _mm512_fmadd_ps(wj, vv[c], acc[h][c]);
        }
      }
    }
  }
  for (int h = 0; h < kGroup; ++h) {
    const __m512 inv = _mm512_set1_ps(1.0f / running_sum[h]);
    for (int c = 0; c < kChunks; ++c) {
      _mm512_storeu_ps(out + (h * kChunks + c) * 16, _mm512_mul_ps(acc[h][c], inv));
    }
  }
}

using AttendFn = void (*)(const PagedAttentionParams&, const float*, const int32_t*, int64_t,
                          int64_t, int64_t, float*);

template <int kChunks, bool kFp8, int... kGroups>
AttendFn PickGroup(int64_t group, std::integer_sequence<int, kGroups...>) {
  AttendFn fn = nullptr;
  ((group == kGroups + 1 ? (fn = AttendGroupAvx512<kChunks, kGroups + 1, kFp8>, 0) : 0), ...);
  return fn;
}

// The vector path for this shape, cache type and CPU (head_dim 64, 96, 128 or 256, up to 8 query
// heads per KV head), or null: the portable path.
AttendFn VectorAttend(int64_t head_dim, int64_t group, bool fp8) {
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  if (!avx512) return nullptr;
  constexpr auto kGroups = std::make_integer_sequence<int, 8>();
  if (head_dim == 64) {
    return fp8 ? PickGroup<4, true>(group, kGroups) : PickGroup<4, false>(group, kGroups);
  }
  if (head_dim == 96) {  // Phi-3-mini
    return fp8 ? PickGroup<6, true>(group, kGroups) : PickGroup<6, false>(group, kGroups);
  }
  if (head_dim == 128) {
    return fp8 ? PickGroup<8, true>(group, kGroups) : PickGroup<8, false>(group, kGroups);
  }
  if (head_dim == 256) {  // Gemma 3: more registers than the CPU has, spilled to L1, still ahead
    return fp8 ? PickGroup<16, true>(group, kGroups) : PickGroup<16, false>(group, kGroups);
  }
  return nullptr;
}
#else
using AttendFn = void (*)(const PagedAttentionParams&, const float*, const int32_t*, int64_t,
                          int64_t, int64_t, float*);
AttendFn VectorAttend(int64_t, int64_t, bool) { return nullptr; }
#endif  // __x86_64__

}  // namespace

void WriteKvCache(const float* k, const float* v, const int64_t* slot_mapping, int64_t num_tokens,
                  int64_t num_kv_heads, int64_t head_dim, float* k_cache, float* v_cache) {
  TP_CHECK(num_tokens >= 0 && num_kv_heads > 0 && head_dim > 0);
  const int64_t row = num_kv_heads * head_dim;  // one token, all KV heads: contiguous in both
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    std::memcpy(k_cache + slot * row, k + t * row, row * sizeof(float));
    std::memcpy(v_cache + slot * row, v + t * row, row * sizeof(float));
  }
}

void WriteKvCacheFp8(const float* k, const float* v, const int64_t* slot_mapping,
                     int64_t num_tokens, int64_t num_kv_heads, int64_t head_dim,
                     const float* k_scales, const float* v_scales, uint8_t* k_cache,
                     uint8_t* v_cache) {
  TP_CHECK(num_tokens >= 0 && num_kv_heads > 0 && head_dim > 0);
  TP_CHECK(k_scales != nullptr && v_scales != nullptr);
  for (int64_t g = 0; g < num_kv_heads; ++g) TP_CHECK(k_scales[g] > 0.0f && v_scales[g] > 0.0f);
  const int64_t row = num_kv_heads * head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    for (int64_t g = 0; g < num_kv_heads; ++g) {
      const int64_t from = t * row + g * head_dim;
      const int64_t to = slot * row + g * head_dim;
      QuantizeE4m3(k + from, head_dim, k_scales[g], k_cache + to);
      QuantizeE4m3(v + from, head_dim, v_scales[g], v_cache + to);
    }
  }
}

void PagedAttention(const PagedAttentionParams& p) {
  TP_CHECK(p.num_seqs >= 0 && p.num_heads > 0 && p.num_kv_heads > 0 && p.head_dim > 0);
  TP_CHECK_MSG((p.k_cache != nullptr && p.v_cache != nullptr && p.k_cache_fp8 == nullptr &&
                p.v_cache_fp8 == nullptr) ||
                   (p.k_cache == nullptr && p.v_cache == nullptr && p.k_cache_fp8 != nullptr &&
                    p.v_cache_fp8 != nullptr && p.k_scales != nullptr && p.v_scales != nullptr),
               "one cache, fp32 or FP8");
  TP_CHECK(p.num_heads % p.num_kv_heads == 0);
  TP_CHECK(p.block_size > 0 && p.max_blocks_per_seq >= 0);
  TP_CHECK(p.query_start[0] == 0);
  for (int64_t s = 0; s < p.num_seqs; ++s) {
    const int64_t q_len = int64_t{p.query_start[s + 1]} - p.query_start[s];
    const int64_t context = p.context_lens[s];
    TP_CHECK_MSG(q_len >= 0 && q_len <= context, "query tokens must be the end of the context");
    TP_CHECK_MSG(context <= p.max_blocks_per_seq * p.block_size, "context exceeds block table");
    const int32_t* table = p.block_tables + s * p.max_blocks_per_seq;
    for (int64_t b = 0; b * p.block_size < context; ++b) TP_CHECK(table[b] >= 0);
  }
  const int64_t num_tokens = p.query_start[p.num_seqs];
  const int64_t group = p.num_heads / p.num_kv_heads;  // query heads per KV head
  const int64_t work = num_tokens * p.num_kv_heads;
  const AttendFn vector_attend = VectorAttend(p.head_dim, group, Fp8(p));

  // Positions differ per token, so the work per item differs: small chunks, taken as threads
  // come free.
  ParallelFor(work, 2, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;  // the portable path's; pool threads live on
    scratch.resize(ScratchFloats(p, group));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t token = item / p.num_kv_heads;
      const int64_t kv_head = item % p.num_kv_heads;
      // The sequence owning `token`: the first s with query_start[s + 1] > token.
      const int64_t s = std::upper_bound(p.query_start + 1, p.query_start + p.num_seqs + 1, token) -
                        (p.query_start + 1);
      const int64_t q_len = int64_t{p.query_start[s + 1]} - p.query_start[s];
      const int64_t position = p.context_lens[s] - q_len + (token - p.query_start[s]);
      const int64_t first_head = token * p.num_heads + kv_head * group;
      const int32_t* table = p.block_tables + s * p.max_blocks_per_seq;
      const int64_t first = p.window > 0 ? std::max<int64_t>(0, position + 1 - p.window) : 0;
      if (vector_attend != nullptr) {
        vector_attend(p, p.q + first_head * p.head_dim, table, first, position + 1, kv_head,
                      p.out + first_head * p.head_dim);
      } else {
        AttendGroup(p, group, p.q + first_head * p.head_dim, table, first, position + 1, kv_head,
                    scratch.data(), p.out + first_head * p.head_dim);
      }
    }
  });
}

}  // namespace tpserve::cpu
