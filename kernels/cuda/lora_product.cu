#include "common/check.h"
#include "kernels/cuda/launch_check.h"
#include "kernels/cuda/lora_product.h"

namespace tpserve::cuda {
namespace {

constexpr int kWarps = 8;  // shrink: one warp per row k of A
constexpr int kExpandThreads = 256;
constexpr int kGroupWords = 2 + kLoraGroupTokens;

// scratch[g, i, k] = A[k] · x[token i of group g], for the block's kWarps rows k of A.
__global__ void LoraShrinkKernel(LoraProductParams p) {
  const int32_t* group = p.groups + blockIdx.x * kGroupWords;
  const int64_t slot = group[0] - 1;
  const int count = group[1];
  const int rank = p.ranks[slot * p.rank_stride];
  const int k = blockIdx.y * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (k >= rank) return;
  const bf16* a = p.a + slot * p.slot_stride + k * p.in;
  const bf16* x[kLoraGroupTokens];
#pragma unroll
  for (int i = 0; i < kLoraGroupTokens; ++i) {
    x[i] = p.x + static_cast<int64_t>(group[2 + (i < count ? i : 0)]) * p.x_stride;
  }
  float sum[kLoraGroupTokens] = {};
  for (int64_t c = lane; c < p.in; c += 32) {
    const float av = ToFloat(a[c]);
#pragma unroll
    for (int i = 0; i < kLoraGroupTokens; ++i) {
      if (i < count) sum[i] += av * ToFloat(x[i][c]);
    }
  }
  float* out = p.scratch + static_cast<int64_t>(blockIdx.x) * kLoraGroupTokens * p.max_rank + k;
#pragma unroll
  for (int i = 0; i < kLoraGroupTokens; ++i) {
    float s = sum[i];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
    if (lane == 0 && i < count) out[i * p.max_rank] = s;
  }
}

// y[token i, j] += Σ_k Bᵀ[k, j] · scratch[g, i, k], column j per thread.
__global__ void LoraExpandKernel(LoraProductParams p) {
  __shared__ float shrunk[kLoraGroupTokens * kMaxLoraKernelRank];
  const int32_t* group = p.groups + blockIdx.x * kGroupWords;
  const int64_t slot = group[0] - 1;
  const int count = group[1];
  const int rank = p.ranks[slot * p.rank_stride];
  if (rank == 0) return;  // the whole block: the module is not the adapter's
  const float* scratch =
      p.scratch + static_cast<int64_t>(blockIdx.x) * kLoraGroupTokens * p.max_rank;
  for (int e = threadIdx.x; e < count * rank; e += blockDim.x) {
    shrunk[e] = scratch[(e / rank) * p.max_rank + e % rank];
  }
  __syncthreads();
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= p.out) return;
  const bf16* bt = p.bt + slot * p.slot_stride + j;
  float sum[kLoraGroupTokens] = {};
  for (int k = 0; k < rank; ++k) {
    const float b = ToFloat(bt[static_cast<int64_t>(k) * p.out]);
#pragma unroll
    for (int i = 0; i < kLoraGroupTokens; ++i) sum[i] += b * shrunk[(i < count ? i : 0) * rank + k];
  }
#pragma unroll
  for (int i = 0; i < kLoraGroupTokens; ++i) {
    if (i >= count) break;
    bf16* y = p.y + static_cast<int64_t>(group[2 + i]) * p.y_stride + j;
    *y = ToBf16(ToFloat(*y) + sum[i]);
  }
}

}  // namespace

void LoraProduct(const LoraProductParams& p, cudaStream_t stream) {
  TP_CHECK(p.num_groups >= 0 && p.max_rank >= 0 && p.max_rank <= kMaxLoraKernelRank && p.in > 0 &&
           p.out > 0);
  if (p.num_groups == 0 || p.max_rank == 0) return;
  const dim3 shrink_grid(static_cast<unsigned>(p.num_groups),
                         static_cast<unsigned>((p.max_rank + kWarps - 1) / kWarps));
  LoraShrinkKernel<<<shrink_grid, kWarps * 32, 0, stream>>>(p);
  TP_CUDA_CHECK_LAUNCH();
  const dim3 expand_grid(static_cast<unsigned>(p.num_groups),
                         static_cast<unsigned>((p.out + kExpandThreads - 1) / kExpandThreads));
  LoraExpandKernel<<<expand_grid, kExpandThreads, 0, stream>>>(p);
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
