// What follows the QKV product in every attention layer, in one kernel (CUDA): split the fused
// [q | k | v] rows, rotate q and k (RoPE), write q out for attention and k and v into the paged KV
// pool (bf16, or FP8 E4M3 codes). One launch where separate copies, rotations and writes took
// six. Mirrors cpu::ApplyRope (kernels/cpu/rope.h: the pair layouts, the frequency table, the
// angle and its cos/sin in double rounded to fp32 once, the rotation in fp32 rounded to bf16 once)
// and cpu::WriteKvCache / cpu::QuantizeE4m3 (kernels/cpu/paged_attention.h, fp8_e4m3.h: the pool
// layout, and the codes of value * (1 / the KV head's scale), round to nearest even, saturating).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cpu/rope.h"
#include "kernels/cuda/bf16.h"

namespace tpserve::cuda {

using RopeStyle = cpu::RopeStyle;

struct QkvRopeParams {
  // Device pointers.
  const bf16* qkv = nullptr;           // [num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim]
  const int32_t* positions = nullptr;  // [num_tokens]
  const int64_t* slot_mapping = nullptr;  // [num_tokens]; negative: padding, no cache write
  const double* inv_freq = nullptr;       // [rope_dims / 2], as ApplyRope takes it
  bf16* q = nullptr;                      // [num_tokens, num_q_heads, head_dim], rotated
  // The pool ([num_blocks, block_size, num_kv_heads, head_dim]): bf16, or FP8 codes of KV head
  // g's values * (1 / k_scales[g]) (of V: v_scales[g]); exactly one pair set.
  bf16* k_cache = nullptr;
  bf16* v_cache = nullptr;
  uint8_t* k_cache_fp8 = nullptr;
  uint8_t* v_cache_fp8 = nullptr;
  const float* k_scales = nullptr;  // [num_kv_heads], with the FP8 pair; finite and positive
  const float* v_scales = nullptr;  // [num_kv_heads], with the FP8 pair

  int64_t num_tokens = 0;
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t rope_dims = 0;  // even, in (0, head_dim]
  RopeStyle style = RopeStyle::kAdjacentPairs;
};

// Queued on `stream`; a bad shape is a bug and aborts with file:line.
void SplitQkvRopeWriteKv(const QkvRopeParams& p, cudaStream_t stream);

}  // namespace tpserve::cuda
