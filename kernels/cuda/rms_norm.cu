#include "kernels/cuda/rms_norm.h"

#include <algorithm>

#include "common/check.h"
#include "kernels/cuda/launch_check.h"

namespace tpserve::cuda {
namespace {

constexpr int kMaxThreads = 1024;

// The sum of `value` over the block, returned to every thread. `scratch` holds one float per warp.
// Contains __syncthreads: every thread of the block must call it.
__device__ float BlockSum(float value, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xFFFFFFFF, value, offset);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  value = lane < warps ? scratch[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xFFFFFFFF, value, offset);
  return value;
}

// One block per row; each thread walks the row in vectors of kWidth bf16 (kWidth = kPackBf16 when
// dim % 8 == 0 and every pointer is 16-byte aligned, else 1). With kAddResidual, `residual` is
// first updated (residual += x, rounded to bf16) and normalized; otherwise `x` is.
// x and out may alias (in place), hence no __restrict__ on them: every element of the row is read
// before the barrier in BlockSum and written after it, by the thread that read it.
template <int kWidth, bool kAddResidual>
__global__ void RmsNormKernel(bf16* residual, const bf16* x, const bf16* __restrict__ weight,
                              int64_t dim, float eps, bf16* out) {
  using Vec = Bf16Vec<kWidth>;
  __shared__ float scratch[kMaxThreads / 32];
  const int64_t vecs = dim / kWidth;
  const int64_t row_offset = static_cast<int64_t>(blockIdx.x) * vecs;
  const Vec* x_row = reinterpret_cast<const Vec*>(x) + row_offset;
  Vec* residual_row = kAddResidual ? reinterpret_cast<Vec*>(residual) + row_offset : nullptr;
  // The values that are normalized: x, or the updated residual.
  const Vec* in_row = kAddResidual ? residual_row : x_row;

  float sum_squares = 0.0f;
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
    Vec v = x_row[i];
    if constexpr (kAddResidual) {
      const Vec r = residual_row[i];
#pragma unroll
      for (int j = 0; j < kWidth; ++j) v.v[j] = ToBf16(ToFloat(r.v[j]) + ToFloat(v.v[j]));
      residual_row[i] = v;
    }
#pragma unroll
    for (int j = 0; j < kWidth; ++j) {
      const float f = ToFloat(v.v[j]);
      sum_squares += f * f;
    }
  }
  const float mean = BlockSum(sum_squares, scratch) / static_cast<float>(dim);
  // IEEE sqrt and division (no --use_fast_math), as in the CPU op; once per row, so cheap.
  const float inv_rms = 1.0f / sqrtf(mean + eps);

  const Vec* w = reinterpret_cast<const Vec*>(weight);
  Vec* out_row = reinterpret_cast<Vec*>(out) + row_offset;
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
    // Re-read rather than kept in registers: the row is in L1/L2 from the first pass, and a
    // register copy would bound dim at compile time.
    const Vec v = in_row[i];
    const Vec wv = w[i];
    Vec o;
#pragma unroll
    for (int j = 0; j < kWidth; ++j) o.v[j] = ToBf16(ToFloat(v.v[j]) * inv_rms * ToFloat(wv.v[j]));
    out_row[i] = o;
  }
}

// One block per q or k head of a token (heads q_heads + kv_heads of each token's fused row).
__global__ void QkHeadRmsNormKernel(bf16* qkv, const bf16* __restrict__ q_weight,
                                    const bf16* __restrict__ k_weight, int64_t q_heads,
                                    int64_t kv_heads, int64_t head_dim, float eps) {
  __shared__ float scratch[kMaxThreads / 32];
  const int64_t normed = q_heads + kv_heads;
  const int64_t token = blockIdx.x / normed;
  const int64_t head = blockIdx.x % normed;  // the k heads follow the q heads in the row
  bf16* row = qkv + (token * (q_heads + 2 * kv_heads) + head) * head_dim;
  const bf16* weight = head < q_heads ? q_weight : k_weight;
  float sum_squares = 0.0f;
  for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) {
    const float f = ToFloat(row[i]);
    sum_squares += f * f;
  }
  const float mean = BlockSum(sum_squares, scratch) / static_cast<float>(head_dim);
  const float inv_rms = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) {
    row[i] = ToBf16(ToFloat(row[i]) * inv_rms * ToFloat(weight[i]));
  }
}

template <bool kAddResidual>
void Launch(bf16* residual, const bf16* x, const bf16* weight, int64_t rows, int64_t dim, float eps,
            bf16* out, cudaStream_t stream) {
  TP_CHECK(rows >= 0 && dim > 0);
  TP_CHECK(rows <= int64_t{0x7FFFFFFF});  // one block per row: the grid's x limit
  if (rows == 0) return;
  const bool packed = dim % kPackBf16 == 0 && IsPackAligned(x) && IsPackAligned(weight) &&
                      IsPackAligned(out) && (!kAddResidual || IsPackAligned(residual));
  const int64_t vecs = packed ? dim / kPackBf16 : dim;
  // Enough warps to give each thread ~1 vector, at most kMaxThreads (Llama dims up to 8192 are
  // <= 1024 packs; longer rows loop).
  const int threads = static_cast<int>(std::clamp<int64_t>((vecs + 31) / 32 * 32, 32, kMaxThreads));
  const dim3 grid(static_cast<unsigned>(rows));
  if (packed) {
    RmsNormKernel<kPackBf16, kAddResidual>
        <<<grid, threads, 0, stream>>>(residual, x, weight, dim, eps, out);
  } else {
    RmsNormKernel<1, kAddResidual>
        <<<grid, threads, 0, stream>>>(residual, x, weight, dim, eps, out);
  }
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void RmsNorm(const bf16* x, const bf16* weight, int64_t rows, int64_t dim, float eps, bf16* out,
             cudaStream_t stream) {
  Launch<false>(nullptr, x, weight, rows, dim, eps, out, stream);
}

void AddRmsNorm(bf16* residual, const bf16* x, const bf16* weight, int64_t rows, int64_t dim,
                float eps, bf16* out, cudaStream_t stream) {
  Launch<true>(residual, x, weight, rows, dim, eps, out, stream);
}

void QkHeadRmsNorm(bf16* qkv, const bf16* q_weight, const bf16* k_weight, int64_t tokens,
                   int64_t q_heads, int64_t kv_heads, int64_t head_dim, float eps,
                   cudaStream_t stream) {
  TP_CHECK(tokens >= 0 && q_heads > 0 && kv_heads > 0 && head_dim > 0);
  TP_CHECK(tokens * (q_heads + kv_heads) <= int64_t{0x7FFFFFFF});
  if (tokens == 0) return;
  const int threads =
      static_cast<int>(std::clamp<int64_t>((head_dim + 31) / 32 * 32, 32, kMaxThreads));
  QkHeadRmsNormKernel<<<static_cast<unsigned>(tokens * (q_heads + kv_heads)), threads, 0, stream>>>(
      qkv, q_weight, k_weight, q_heads, kv_heads, head_dim, eps);
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
