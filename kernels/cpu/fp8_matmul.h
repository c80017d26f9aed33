// FP8 W8A8 products as the CUDA FP8 linears compute them (kernels/cuda/fp8_gemm.h), in plain
// scalar code: the reference their GPU tests compare against, and the numerics that
// `--quantization fp8` gives a model.
//
// Scales are per row: per output channel for a weight [out_features, in_features], per token for
// activations [tokens, in_features]. A row's scale is max|x| / 448, so its largest value maps to
// E4M3's largest finite, 448 (a row of zeros gets 1); its codes are ToE4m3(x * (1 / scale)).
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// codes[r, :] = ToE4m3(x[r, :] * (1 / scales[r])), scales[r] = max_c |x[r, c]| / 448 (1 for an
// all-zero row). x: [rows, cols] row-major; codes: [rows, cols]; scales: [rows]. Non-finite
// values are the caller's error (the scale would be inf or NaN).
void QuantizeRowsE4m3(const float* x, int64_t rows, int64_t cols, uint8_t* codes, float* scales);

// c[i, j] = a_scales[i] * b_scales[j] * sum_k FromE4m3(a[i, k]) * FromE4m3(b[j, k]), the sum in
// fp32 in order of k. a: [m, k] codes (activations), b: [n, k] codes (a weight as rows); c: [m, n].
void MatmulE4m3BT(const uint8_t* a, const float* a_scales, const uint8_t* b, const float* b_scales,
                  int64_t m, int64_t n, int64_t k, float* c);

}  // namespace tpserve::cpu
