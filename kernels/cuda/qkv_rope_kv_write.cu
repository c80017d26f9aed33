#include <cuda_fp8.h>

#include "common/check.h"
#include "kernels/cuda/launch_check.h"
#include "kernels/cuda/qkv_rope_kv_write.h"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

// (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos), each rounded to bf16. Each product and the
// difference (sum) are rounded separately, as the CPU op's fp32 expression is: no fused
// multiply-add, which the compiler could otherwise form for one element of a pair and not the
// other.
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

// One block per token: cos/sin of its angles into shared memory, then one element of the token's
// qkv row per thread and iteration. A rotated element reads its pair's partner and keeps its own
// half of RopeRotate's result, so each pair is computed twice, to the same bits.
template <bool kFp8>
__global__ void __launch_bounds__(kThreads)
    SplitQkvRopeKernel(QkvRopeParams p, int64_t half, bool adjacent) {
  extern __shared__ float cos_sin[];  // [2 * half]
  float* cos_a = cos_sin;
  float* sin_a = cos_sin + half;
  const int64_t token = blockIdx.x;
  RopeAngles(static_cast<double>(p.positions[token]), p.inv_freq, half, cos_a, sin_a);
  __syncthreads();

  const int64_t hd = p.head_dim;
  const int64_t kv_width = p.num_kv_heads * hd;
  const int64_t q_width = p.num_q_heads * hd;
  const int64_t width = q_width + 2 * kv_width;
  const bf16* row = p.qkv + token * width;
  const int64_t slot = p.slot_mapping[token];
  for (int64_t e = threadIdx.x; e < width; e += kThreads) {
    const int64_t d = e % hd;
    const bf16* head = row + (e - d);
    bf16 value = row[e];
    if (e < q_width + kv_width && d < p.rope_dims) {  // q or k, a rotated dim
      int64_t i, d0, d1;                              // the pair's index and its two dims
      if (adjacent) {
        i = d / 2;
        d0 = 2 * i;
        d1 = d0 + 1;
      } else {
        i = d < half ? d : d - half;
        d0 = i;
        d1 = i + half;
      }
      bf16 y0, y1;
      RopeRotate(ToFloat(head[d0]), ToFloat(head[d1]), cos_a[i], sin_a[i], &y0, &y1);
      value = d == d0 ? y0 : y1;
    }
    if (e < q_width) {
      p.q[token * q_width + e] = value;
      continue;
    }
    if (slot < 0) continue;
    const bool is_k = e < q_width + kv_width;
    const int64_t offset = slot * kv_width + (e - q_width - (is_k ? 0 : kv_width));
    if constexpr (kFp8) {
      // Rounded to nearest whatever the build's flags, as QuantizeE4m3's 1.0f / scale.
      const int64_t kv_head = (e - q_width - (is_k ? 0 : kv_width)) / hd;
      const float inverse = __fdiv_rn(1.0f, (is_k ? p.k_scales : p.v_scales)[kv_head]);
      (is_k ? p.k_cache_fp8 : p.v_cache_fp8)[offset] =
          __nv_cvt_float_to_fp8(ToFloat(value) * inverse, __NV_SATFINITE, __NV_E4M3);
    } else {
      (is_k ? p.k_cache : p.v_cache)[offset] = value;
    }
  }
}

}  // namespace

void SplitQkvRopeWriteKv(const QkvRopeParams& p, cudaStream_t stream) {
  TP_CHECK(p.num_tokens >= 0 && p.num_q_heads > 0 && p.num_kv_heads > 0 && p.head_dim > 0);
  TP_CHECK(p.rope_dims > 0 && p.rope_dims % 2 == 0 && p.rope_dims <= p.head_dim);
  TP_CHECK(p.rope_dims <= 8192);  // the angles' shared memory
  TP_CHECK(p.num_tokens <= int64_t{0x7FFFFFFF});
  const bool fp8 = p.k_cache_fp8 != nullptr;
  TP_CHECK(fp8 == (p.v_cache_fp8 != nullptr) && fp8 == (p.k_cache == nullptr) &&
           fp8 == (p.v_cache == nullptr));
  TP_CHECK(!fp8 || (p.k_scales != nullptr && p.v_scales != nullptr));
  if (p.num_tokens == 0) return;
  const int64_t half = p.rope_dims / 2;
  const bool adjacent = p.style == RopeStyle::kAdjacentPairs;
  const size_t shared_bytes = 2 * static_cast<size_t>(half) * sizeof(float);
  const unsigned blocks = static_cast<unsigned>(p.num_tokens);
  if (fp8) {
    SplitQkvRopeKernel<true><<<blocks, kThreads, shared_bytes, stream>>>(p, half, adjacent);
  } else {
    SplitQkvRopeKernel<false><<<blocks, kThreads, shared_bytes, stream>>>(p, half, adjacent);
  }
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
