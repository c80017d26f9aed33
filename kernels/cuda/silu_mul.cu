#include "kernels/cuda/silu_mul.h"

#include <algorithm>

#include "common/check.h"
#include "kernels/cuda/launch_check.h"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

// Grid-stride over `count` vectors of kWidth bf16. out may alias gate or up (each element is
// read and written by the same thread), hence no __restrict__.
template <int kWidth>
__global__ void SiluMulKernel(const bf16* gate, const bf16* up, int64_t count, bf16* out) {
  using Vec = Bf16Vec<kWidth>;
  const Vec* g = reinterpret_cast<const Vec*>(gate);
  const Vec* u = reinterpret_cast<const Vec*>(up);
  Vec* o = reinterpret_cast<Vec*>(out);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const Vec gv = g[i];
    const Vec uv = u[i];
    Vec ov;
#pragma unroll
    for (int j = 0; j < kWidth; ++j) {
      const float x = ToFloat(gv.v[j]);
      // For x -> -inf, expf(-x) overflows to inf and x / inf = -0: the correct limit.
      ov.v[j] = ToBf16(x / (1.0f + expf(-x)) * ToFloat(uv.v[j]));
    }
    o[i] = ov;
  }
}

int BlocksFor(int64_t count) {
  // Enough blocks to cover `count` once, capped: past a few waves of SMs the grid-stride loop
  // does the rest without paying for more block launches.
  return static_cast<int>(std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1, 4096));
}

}  // namespace

void SiluMul(const bf16* gate, const bf16* up, int64_t n, bf16* out, cudaStream_t stream) {
  TP_CHECK(n >= 0);
  if (n == 0) return;
  if (n % kPackBf16 == 0 && IsPackAligned(gate) && IsPackAligned(up) && IsPackAligned(out)) {
    const int64_t count = n / kPackBf16;
    SiluMulKernel<kPackBf16><<<BlocksFor(count), kThreads, 0, stream>>>(gate, up, count, out);
  } else {
    SiluMulKernel<1><<<BlocksFor(n), kThreads, 0, stream>>>(gate, up, n, out);
  }
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
