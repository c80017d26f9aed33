// Dense fp32 matrix product against a weight stored as rows (CPU). Up to kStreamedRowsMax
// activation rows (decode steps, the verification of speculated tokens) on AVX-512: each weight
// row is read once for all of them, on the kernels' pool (parallel_for.h), and a row's outputs are
// the same bits whatever the other rows; more rows, or no AVX-512: OpenBLAS, which repacks the
// weight on every call (at 5 rows 1.7x the time of 1, docs/PERFORMANCE.md).
#pragma once

#include <cstdint>

namespace tpserve::cpu {

inline constexpr int64_t kStreamedRowsMax = 16;

// c = a * b^T           (accumulate == false; c is not read, so it may hold garbage or NaN)
// c = c + a * b^T       (accumulate == true)
//   a: [m, k]  row-major activations, e.g. [num_tokens, in_features]
//   b: [n, k]  row-major weight in the checkpoint's layout [out_features, in_features]
//   c: [m, n]  row-major, e.g. [num_tokens, out_features]; must not overlap a or b.
// m, n, k must fit in a 32-bit int (the BLAS interface); zero sizes are allowed.
// Threads: CpuThreads() (threads.h), in the kernels' pool or OpenBLAS's.
void MatmulBT(const float* a, const float* b, int64_t m, int64_t n, int64_t k, float* c,
              bool accumulate = false);

}  // namespace tpserve::cpu
