// Rotary position embedding (RoPE) applied in place to Q or K (bf16, CUDA). Mirrors
// kernels/cpu/rope.h, whose RopeStyle it shares so that a model picks its layout once for both
// backends.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cpu/rope.h"
#include "kernels/cuda/bf16.h"

namespace tpserve::cuda {

using RopeStyle = cpu::RopeStyle;

// Rotates every head of every token in place, queued on `stream`; device pointers:
//   (x0, x1) -> (x0 cos(a) - x1 sin(a),  x0 sin(a) + x1 cos(a)),  a = positions[t] * inv_freq[i],
//   pair i as given by `style` (see cpu::RopeStyle).
// As on the CPU, the angle and its cos/sin are computed in double and rounded to fp32 once, so
// large positions lose no precision; the rotation is fp32 and each result is rounded to bf16 once.
//   x:         [num_tokens, num_heads, head_dim], contiguous
//   positions: [num_tokens], absolute position of each token in its sequence (>= 0)
//   rope_dims: even, in (0, head_dim]; dims [rope_dims, head_dim) are left untouched.
//   inv_freq:  [rope_dims / 2] on the device, the angle per position of each pair (the model's
//              table from model/rope_frequencies.h, the one the CPU op takes).
// Apply it to Q (num_heads) and to K (num_kv_heads) with separate calls.
void ApplyRope(bf16* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads,
               int64_t head_dim, int64_t rope_dims, const double* inv_freq, RopeStyle style,
               cudaStream_t stream);

}  // namespace tpserve::cuda
