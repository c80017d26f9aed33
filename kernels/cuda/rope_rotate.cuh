// The rotation of one RoPE pair, shared by the RoPE kernel (rope.cu) and the fused QKV kernel
// (qkv_rope_kv_write.cu), so both give the same bits: each product and the difference (sum) are
// rounded separately (no fused multiply-add, which the compiler might form in one kernel and not
// the other), then the result once to bf16. Include it only from .cu files.
#pragma once

#include "kernels/cuda/bf16.h"

namespace tpserve::cuda::internal {

// (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos), each rounded to bf16.
__device__ __forceinline__ void RopeRotate(float x0, float x1, float cos_a, float sin_a, bf16* y0,
                                           bf16* y1) {
  *y0 = ToBf16(__fsub_rn(__fmul_rn(x0, cos_a), __fmul_rn(x1, sin_a)));
  *y1 = ToBf16(__fadd_rn(__fmul_rn(x0, sin_a), __fmul_rn(x1, cos_a)));
}

// cos and sin of position * inv_freq[i] for i in [0, half), computed in double and rounded to
// fp32 once (the CPU op's expression), into shared memory by the block's threads; the caller
// syncs before reading them.
__device__ __forceinline__ void RopeAngles(double position, const double* inv_freq, int64_t half,
                                           float* cos_a, float* sin_a) {
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    double s, c;
    sincos(position * inv_freq[i], &s, &c);
    cos_a[i] = static_cast<float>(c);
    sin_a[i] = static_cast<float>(s);
  }
}

}  // namespace tpserve::cuda::internal
