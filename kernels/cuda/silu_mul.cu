#include <algorithm>

#include "common/check.h"
#include "kernels/cuda/launch_check.h"
#include "kernels/cuda/silu_mul.h"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

// silu(gate) * up in fp32, one bf16 rounding. For gate -> -inf, expf(-gate) overflows to inf and
// gate / inf = -0: the correct limit.
__device__ __forceinline__ bf16 SiluTimes(bf16 gate, bf16 up) {
  const float x = ToFloat(gate);
  return ToBf16(x / (1.0f + expf(-x)) * ToFloat(up));
}

__device__ __forceinline__ bf16 GeluTanhTimes(bf16 gate, bf16 up) {
  const float x = ToFloat(gate);
  return ToBf16(0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) *
                ToFloat(up));
}

// Grid-stride over `count` vectors of kWidth bf16 of out: rows of `width` vectors, row r from
// gate_up's row r, [gate | up] of 2 * `width` vectors.
template <int kWidth, bool kGelu>
__global__ void GatedRowsKernel(const bf16* __restrict__ gate_up, int64_t width, int64_t count,
                                bf16* __restrict__ out) {
  using Vec = Bf16Vec<kWidth>;
  const Vec* gu = reinterpret_cast<const Vec*>(gate_up);
  Vec* o = reinterpret_cast<Vec*>(out);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const int64_t r = i / width;
    const Vec gv = gu[i + r * width];  // row r starts at 2 * r * width
    const Vec uv = gu[i + (r + 1) * width];
    Vec ov;
#pragma unroll
    for (int j = 0; j < kWidth; ++j) {
      ov.v[j] = kGelu ? GeluTanhTimes(gv.v[j], uv.v[j]) : SiluTimes(gv.v[j], uv.v[j]);
    }
    o[i] = ov;
  }
}

int BlocksFor(int64_t count) {
  // Enough blocks to cover `count` once, capped: past a few waves of SMs the grid-stride loop
  // does the rest without paying for more block launches.
  return static_cast<int>(std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1, 4096));
}

template <bool kGelu>
void LaunchGatedRows(const bf16* gate_up, int64_t rows, int64_t width, bf16* out,
                     cudaStream_t stream) {
  TP_CHECK(rows >= 0 && width >= 0);
  if (rows == 0 || width == 0) return;
  if (width % kPackBf16 == 0 && IsPackAligned(gate_up) && IsPackAligned(out)) {
    const int64_t vecs = width / kPackBf16;
    GatedRowsKernel<kPackBf16, kGelu>
        <<<BlocksFor(rows * vecs), kThreads, 0, stream>>>(gate_up, vecs, rows * vecs, out);
  } else {
    GatedRowsKernel<1, kGelu>
        <<<BlocksFor(rows * width), kThreads, 0, stream>>>(gate_up, width, rows * width, out);
  }
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void SiluMulRows(const bf16* gate_up, int64_t rows, int64_t width, bf16* out, cudaStream_t stream) {
  LaunchGatedRows<false>(gate_up, rows, width, out, stream);
}

void GeluTanhMulRows(const bf16* gate_up, int64_t rows, int64_t width, bf16* out,
                     cudaStream_t stream) {
  LaunchGatedRows<true>(gate_up, rows, width, out, stream);
}

}  // namespace tpserve::cuda
