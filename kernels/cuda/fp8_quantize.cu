#include <cuda_fp8.h>

#include "common/check.h"
#include "kernels/cpu/fp8_e4m3.h"
#include "kernels/cuda/fp8_quantize.h"
#include "kernels/cuda/launch_check.h"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row: the row's max |x| (a warp reduction, then one over the warps' maxima through
// shared memory), then its codes. The scale and its inverse are computed as the CPU computes
// them (one IEEE division each), so the codes are the same.
__global__ void __launch_bounds__(kThreads)
    QuantizeRowsKernel(const bf16* __restrict__ x, int64_t cols, uint8_t* __restrict__ codes,
                       float* __restrict__ scales) {
  __shared__ float warp_max[kThreads / 32];
  __shared__ float row_inverse;
  const int64_t row = blockIdx.x;
  const bf16* in = x + row * cols;
  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) amax = fmaxf(amax, fabsf(ToFloat(in[c])));
  for (int offset = 16; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  }
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
    const float scale = m > 0.0f ? __fdiv_rn(m, cpu::kE4m3Max) : 1.0f;
    scales[row] = scale;
    row_inverse = __fdiv_rn(1.0f, scale);
  }
  __syncthreads();
  const float inverse = row_inverse;
  uint8_t* out = codes + row * cols;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    out[c] = __nv_cvt_float_to_fp8(ToFloat(in[c]) * inverse, __NV_SATFINITE, __NV_E4M3);
  }
}

// Grid-stride over the m * n elements. The two scales are multiplied first, as
// cpu::MatmulE4m3BT does.
__global__ void ScaleOuterKernel(const float* __restrict__ raw,
                                 const float* __restrict__ row_scales,
                                 const float* __restrict__ col_scales, int64_t n, int64_t count,
                                 bf16* __restrict__ out) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < count;
       e += int64_t{gridDim.x} * blockDim.x) {
    out[e] = ToBf16(row_scales[e / n] * col_scales[e % n] * raw[e]);
  }
}

}  // namespace

void QuantizeRowsE4m3(const bf16* x, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                      cudaStream_t stream) {
  TP_CHECK(rows >= 0 && cols > 0 && rows <= int64_t{0x7FFFFFFF});
  if (rows == 0) return;
  QuantizeRowsKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, cols, codes, scales);
  TP_CUDA_CHECK_LAUNCH();
}

void ScaleOuterToBf16(const float* raw, const float* row_scales, const float* col_scales, int64_t m,
                      int64_t n, bf16* out, cudaStream_t stream) {
  TP_CHECK(m >= 0 && n >= 0);
  if (m == 0 || n == 0) return;
  const int64_t count = m * n;
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  ScaleOuterKernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), kThreads, 0, stream>>>(
      raw, row_scales, col_scales, n, count, out);
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
