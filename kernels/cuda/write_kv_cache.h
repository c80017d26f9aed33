// Stores a step's K and V into the paged KV pools (bf16, CUDA). Mirrors cpu::WriteKvCache in
// kernels/cpu/paged_attention.h; the pools have the layout described there and in DESIGN.md
// "KV cache and the prefix tree":
//   k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim]
// A token's slot is  block_id * block_size + offset_in_block; the K (or V) vector of slot s and
// KV head g starts at  (s * num_kv_heads + g) * head_dim.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/bf16.h"

namespace tpserve::cuda {

// k_cache[slot_mapping[t], :, :] = k[t, :, :] and the same for v, queued on `stream`; device
// pointers. Exact: values are copied, not converted.
//   k, v:         [num_tokens, num_kv_heads, head_dim]
//   slot_mapping: [num_tokens]; block_id * block_size + offset. A negative slot skips the token
//                 (padding). The caller guarantees slots are inside the cache and distinct.
//   k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim]
void WriteKvCache(const bf16* k, const bf16* v, const int64_t* slot_mapping, int64_t num_tokens,
                  int64_t num_kv_heads, int64_t head_dim, bf16* k_cache, bf16* v_cache,
                  cudaStream_t stream);

// The same into FP8 pools of the same layout, one byte per value: each value stored as the E4M3
// code of value * (1 / scale), rounded to nearest even and saturated at +-448 (cpu::QuantizeE4m3's
// codes, bit for bit; NaN -> 0x7F).
void WriteKvCacheFp8(const bf16* k, const bf16* v, const int64_t* slot_mapping, int64_t num_tokens,
                     int64_t num_kv_heads, int64_t head_dim, float scale, uint8_t* k_cache,
                     uint8_t* v_cache, cudaStream_t stream);

}  // namespace tpserve::cuda
