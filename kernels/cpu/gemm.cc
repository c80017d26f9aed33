#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <climits>

#include "common/check.h"

namespace tpserve::cpu {

void MatmulBT(const float* a, const float* b, int64_t m, int64_t n, int64_t k, float* c,
              bool accumulate) {
  TP_CHECK(m >= 0 && n >= 0 && k >= 0);
  TP_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX);  // blasint is 32-bit in Debian's build.
  if (m == 0 || n == 0) return;
  if (k == 0) {  // An empty sum; some BLAS builds reject k == 0 with lda >= 1 checks.
    if (!accumulate) std::fill(c, c + m * n, 0.0f);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(k), b,
              static_cast<blasint>(k), accumulate ? 1.0f : 0.0f, c, static_cast<blasint>(n));
}

}  // namespace tpserve::cpu
