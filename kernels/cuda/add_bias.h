// A projection's bias added to each of its output rows (bf16 rows, fp32 bias, CUDA): Qwen2's
// q/k/v biases. Mirrors kernels/cpu/add_bias.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/bf16.h"

namespace tpserve::cuda {

// x[r, j] = bf16(float(x[r, j]) + bias[j]) for r in [0, rows), j in [0, width), queued on
// `stream`; device pointers. The bias stays fp32 so that the sum is rounded to bf16 once.
//   x: [rows, width], contiguous; bias: [width].
void AddBias(bf16* x, const float* bias, int64_t rows, int64_t width, cudaStream_t stream);

}  // namespace tpserve::cuda
