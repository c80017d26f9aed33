// Dense fp32 matrix product against a weight stored as rows, through OpenBLAS (CPU).
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// c = a * b^T           (accumulate == false; c is not read, so it may hold garbage or NaN)
// c = c + a * b^T       (accumulate == true)
//   a: [m, k]  row-major activations, e.g. [num_tokens, in_features]
//   b: [n, k]  row-major weight in the checkpoint's layout [out_features, in_features]
//   c: [m, n]  row-major, e.g. [num_tokens, out_features]; must not overlap a or b.
// m, n, k must fit in a 32-bit int (the BLAS interface); zero sizes are allowed.
// Threads: OpenBLAS's own pool (OPENBLAS_NUM_THREADS).
void MatmulBT(const float* a, const float* b, int64_t m, int64_t n, int64_t k, float* c,
              bool accumulate = false);

}  // namespace tpserve::cpu
