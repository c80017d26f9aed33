#include "common/check.h"
#include "kernels/cuda/launch_check.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/rope_rotate.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 128;

// One block per token. The block first computes cos/sin of its token's rope_dims / 2 angles into
// shared memory (double precision, once per token rather than once per head), then rotates all
// num_heads * rope_dims / 2 pairs of the token, one pair per thread per iteration.
// Pair i of a head is (x[first * i], x[first * i + second]): (2i, 2i + 1) for adjacent pairs,
// (i, i + half) for rotate-half.
__global__ void RopeKernel(bf16* __restrict__ x, const int32_t* __restrict__ positions,
                           const double* __restrict__ inv_freq, int64_t num_heads, int64_t head_dim,
                           int64_t half, int64_t first, int64_t second) {
  extern __shared__ float cos_sin[];  // [2 * half]: cos then sin
  float* cos_a = cos_sin;
  float* sin_a = cos_sin + half;
  const int64_t token = blockIdx.x;
  internal::RopeAngles(static_cast<double>(positions[token]), inv_freq, half, cos_a, sin_a);
  __syncthreads();

  bf16* xt = x + token * num_heads * head_dim;
  const int64_t pairs = num_heads * half;
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int64_t head = p / half;
    const int64_t i = p % half;
    bf16* xh = xt + head * head_dim;
    const int64_t i0 = first * i;
    const int64_t i1 = i0 + second;
    internal::RopeRotate(ToFloat(xh[i0]), ToFloat(xh[i1]), cos_a[i], sin_a[i], &xh[i0], &xh[i1]);
  }
}

}  // namespace

void ApplyRope(bf16* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads,
               int64_t head_dim, int64_t rope_dims, const double* inv_freq, RopeStyle style,
               cudaStream_t stream) {
  TP_CHECK(num_tokens >= 0 && num_heads > 0 && head_dim > 0);
  TP_CHECK(rope_dims > 0 && rope_dims % 2 == 0 && rope_dims <= head_dim);
  TP_CHECK(inv_freq != nullptr);
  TP_CHECK(num_tokens <= int64_t{0x7FFFFFFF});  // one block per token: the grid's x limit
  // Shared memory holds 2 * half floats: head_dim 128 -> 512 bytes; anything a model has fits.
  TP_CHECK(rope_dims <= 8192);
  if (num_tokens == 0) return;
  const int64_t half = rope_dims / 2;
  const bool adjacent = style == RopeStyle::kAdjacentPairs;
  const size_t shared_bytes = 2 * static_cast<size_t>(half) * sizeof(float);
  RopeKernel<<<static_cast<unsigned>(num_tokens), kThreads, shared_bytes, stream>>>(
      x, positions, inv_freq, num_heads, head_dim, half, adjacent ? 2 : 1, adjacent ? 1 : half);
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
