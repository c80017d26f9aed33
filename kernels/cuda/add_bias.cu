#include "kernels/cuda/add_bias.h"

#include <algorithm>

#include "common/check.h"
#include "kernels/cuda/launch_check.h"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

// Grid-stride over the rows × width elements; a step's QKV is at most a few million of them.
__global__ void AddBiasKernel(bf16* __restrict__ x, const float* __restrict__ bias, int64_t count,
                              int64_t width) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    x[i] = ToBf16(ToFloat(x[i]) + bias[i % width]);
  }
}

}  // namespace

void AddBias(bf16* x, const float* bias, int64_t rows, int64_t width, cudaStream_t stream) {
  TP_CHECK(rows >= 0 && width > 0);
  const int64_t count = rows * width;
  if (count == 0) return;
  const int blocks =
      static_cast<int>(std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1, 4096));
  AddBiasKernel<<<blocks, kThreads, 0, stream>>>(x, bias, count, width);
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
