// Per-row FP8 E4M3 quantization and the scale epilogue of the FP8 linears (CUDA). Mirrors
// kernels/cpu/fp8_matmul.h, whose header states the format: a row's scale is max|x| / 448 (1 for
// an all-zero row) and its codes are E4M3(x * (1 / scale)), rounded to nearest even.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/bf16.h"

namespace tpserve::cuda {

// codes[r, :] and scales[r] for x [rows, cols] (bf16, row-major), queued on `stream`; the same
// bits as cpu::QuantizeRowsE4m3 of x's values. Weights at load (rows = output channels) and
// activations before each FP8 product (rows = tokens).
void QuantizeRowsE4m3(const bf16* x, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                      cudaStream_t stream);

// out[i, j] = bf16(raw[i, j] * row_scales[i] * col_scales[j]) for raw [m, n] fp32: the scales
// applied after an unscaled FP8 product, where cuBLASLt offers no per-row scaling of its own.
void ScaleOuterToBf16(const float* raw, const float* row_scales, const float* col_scales, int64_t m,
                      int64_t n, bf16* out, cudaStream_t stream);

}  // namespace tpserve::cuda
