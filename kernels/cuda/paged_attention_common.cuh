// Internal to the paged attention kernels (paged_attention.cu, paged_attention_decode.cu,
// paged_attention_prefill.cu); the public API is kernels/cuda/paged_attention.h. Holds the
// device helpers that the decode and prefill kernels share and the two launchers that
// PagedAttention dispatches to. Include it only from .cu files: it defines device functions.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/paged_attention.h"

namespace tpserve::cuda::internal {

// Scores are kept in the log2 domain (scale * log2(e) folded into q or into the score), so every
// exponential is one exp2f.
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr unsigned kFullMask = 0xFFFFFFFFu;

// Eight bf16 (one 16-byte load) to fp32: a bf16 is the high half of the fp32 with the same value.
__device__ __forceinline__ void Unpack8(const uint4& raw, float (&f)[8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);  // the lower address holds the lower half
    f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

// Eight FP8 E4M3 codes (one 8-byte load of an FP8 cache row) to fp32, exactly (every E4M3 value
// is a half); the lower address holds the first value. 0x7F and 0xFF are NaN, as FromE4m3 says.
__device__ __forceinline__ void UnpackE4m3x8(const uint2& raw, float (&f)[8]) {
  const uint32_t w[2] = {raw.x, raw.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(w[i] >> (16 * j));
      const float2 v = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      f[4 * i + 2 * j] = v.x;
      f[4 * i + 2 * j + 1] = v.y;
    }
  }
}

// Eight fp32 to bf16 (round to nearest even), as one 16-byte value.
__device__ __forceinline__ uint4 Pack8(const float (&f)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);  // .x = low half
    w[i] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The decode kernels (paged_attention_decode.cu) and the prefill kernel
// (paged_attention_prefill.cu), queued on `stream`. PagedAttention has checked `p`
// (PagedAttentionSupported, the batch bounds, alignment, one cache format set) and that the batch
// is not empty; the prefill runs (when max_query_len > 1) for the sequences of more than one query
// token, the decode for those of one (its work list holds no others). An FP8 cache's K and V
// scales multiply the scores and the output once rather than each value.
void PagedAttentionDecode(const PagedAttentionParams& p, cudaStream_t stream);
void PagedAttentionPrefill(const PagedAttentionParams& p, cudaStream_t stream);

}  // namespace tpserve::cuda::internal
