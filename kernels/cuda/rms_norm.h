// RMSNorm as in Llama (bf16 in and out, fp32 statistics, CUDA). Mirrors kernels/cpu/rms_norm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/bf16.h"

namespace tpserve::cuda {

// For each row r: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:], queued on
// `stream`; device pointers. The sum of squares is accumulated in fp32, per thread and then as a
// tree over the block (the CPU op uses double; for Llama's dims the difference is ~1e-6 relative,
// far below bf16's 2^-9); each output is computed in fp32 and rounded to bf16 once.
//   x:      [rows, dim]
//   weight: [dim]
//   out:    [rows, dim]; may be the same pointer as x (in place), must not partially overlap it.
void RmsNorm(const bf16* x, const bf16* weight, int64_t rows, int64_t dim, float eps, bf16* out,
             cudaStream_t stream);

// The fused residual step of a Llama layer:
//   residual[r, :] += x[r, :];  out[r, :] = RmsNorm(residual[r, :]) * weight.
// The sum is rounded to bf16 when stored, and the normalization reads the stored (rounded)
// residual, so `out` is exactly RmsNorm of what the next layer adds to.
//   residual: [rows, dim], updated in place
//   x:        [rows, dim] (the attention or MLP output being added)
//   weight:   [dim]
//   out:      [rows, dim]; may be the same pointer as x, must not overlap residual.
void AddRmsNorm(bf16* residual, const bf16* x, const bf16* weight, int64_t rows, int64_t dim,
                float eps, bf16* out, cudaStream_t stream);

// Qwen3's q/k norms, in place on the fused [q | k | v] rows of `tokens` tokens: each q head's
// head_dim values are RmsNorm'd with q_weight, each k head's with k_weight, as RmsNorm does a row;
// v is left alone.
//   qkv: [tokens, (q_heads + 2 * kv_heads) * head_dim]; q_weight, k_weight: [head_dim]
void QkHeadRmsNorm(bf16* qkv, const bf16* q_weight, const bf16* k_weight, int64_t tokens,
                   int64_t q_heads, int64_t kv_heads, int64_t head_dim, float eps,
                   cudaStream_t stream);

}  // namespace tpserve::cuda
