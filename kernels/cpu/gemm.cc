#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <climits>

#include "common/check.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/x86_intrinsics.h"

namespace tpserve::cpu {
namespace {

#if defined(__x86_64__)
#define TP_TARGET_AVX512 __attribute__((target("avx512f")))

// Weight rows read together, and activation rows multiplied with them per pass: 16 accumulators.
constexpr int kPassWeightRows = 4;
constexpr int kPassRows = 4;
// The k range of one round over every activation row: the pass's weight rows' slice (32 KiB)
// stays in the first-level cache while each group of activation rows reads it.
constexpr int64_t kSliceFloats = 2048;
// How far ahead in each weight row the loads ask for memory: with a few activation rows the FMAs
// between two loads of a row left the hardware prefetchers behind (a layer at 5 rows 12-19%
// faster with this, tpserve-bench-packed BM_Fp32Layer). Past a row's end it asks for the next row's
// first floats, or past the matrix, which a prefetch never faults on.
constexpr int64_t kPrefetchFloats = 256;

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// Adds a[i0 + i][kk0, kk1) · b[j0 + w][kk0, kk1) to the 16-lane partial sums acc[i][w], chunk by
// chunk in k order: whichever rows share a pass, each output sees the same additions in the same
// order, so a row's outputs do not depend on the batch it runs in.
template <int kW, int kI>
TP_TARGET_AVX512 void StreamSlice(const float* a, const float* b, int64_t k, int64_t i0, int64_t j0,
                                  int64_t kk0, int64_t kk1, __m512 (*acc)[kW]) {
  __m512 sum[kI][kW];
  for (int i = 0; i < kI; ++i) {
    for (int w = 0; w < kW; ++w) sum[i][w] = acc[i][w];
  }
  for (int64_t kk = kk0; kk < kk1; kk += 16) {
    const __mmask16 mask = kk1 - kk >= 16 ? static_cast<__mmask16>(0xFFFF)
                                          : static_cast<__mmask16>((1u << (kk1 - kk)) - 1);
    __m512 bw[kW];
    for (int w = 0; w < kW; ++w) {
      _mm_prefetch(reinterpret_cast<const char*>(b + (j0 + w) * k + kk + kPrefetchFloats),
                   _MM_HINT_T0);
    }
    for (int w = 0; w < kW; ++w) bw[w] = _mm512_maskz_loadu_ps(mask, b + (j0 + w) * k + kk);
    for (int i = 0; i < kI; ++i) {
      const __m512 ai = _mm512_maskz_loadu_ps(mask, a + (i0 + i) * k + kk);
      for (int w = 0; w < kW; ++w) sum[i][w] = _mm512_fmadd_ps(ai, bw[w], sum[i][w]);
    }
  }
  for (int i = 0; i < kI; ++i) {
    for (int w = 0; w < kW; ++w) acc[i][w] = sum[i][w];
  }
}

// c[·][j0, j0 + kW) for all m rows: the weight rows stream through once, slice by slice.
template <int kW>
TP_TARGET_AVX512 void StreamWeightRows(const float* a, const float* b, int64_t m, int64_t n,
                                       int64_t k, int64_t j0, float* c, bool accumulate) {
  __m512 acc[kStreamedRowsMax][kW];
  for (int64_t i = 0; i < m; ++i) {
    for (int w = 0; w < kW; ++w) acc[i][w] = _mm512_setzero_ps();
  }
  for (int64_t kk0 = 0; kk0 < k; kk0 += kSliceFloats) {
    const int64_t kk1 = std::min(k, kk0 + kSliceFloats);
    int64_t i0 = 0;
    for (; i0 + kPassRows <= m; i0 += kPassRows) {
      StreamSlice<kW, kPassRows>(a, b, k, i0, j0, kk0, kk1, acc + i0);
    }
    switch (m - i0) {
      case 3:
        StreamSlice<kW, 3>(a, b, k, i0, j0, kk0, kk1, acc + i0);
        break;
      case 2:
        StreamSlice<kW, 2>(a, b, k, i0, j0, kk0, kk1, acc + i0);
        break;
      case 1:
        StreamSlice<kW, 1>(a, b, k, i0, j0, kk0, kk1, acc + i0);
        break;
    }
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int w = 0; w < kW; ++w) {
      float& out = c[i * n + j0 + w];
      const float sum = _mm512_reduce_add_ps(acc[i][w]);
      out = accumulate ? out + sum : sum;
    }
  }
}

// Every weight row read once from memory for all m activation rows (which stay in cache), the
// kernels' pool splitting the weight rows.
void StreamedMatmulBT(const float* a, const float* b, int64_t m, int64_t n, int64_t k, float* c,
                      bool accumulate) {
  const int64_t passes = (n + kPassWeightRows - 1) / kPassWeightRows;
  ParallelFor(passes, FewChunksPerThread(passes), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t j0 = p * kPassWeightRows;
      if (j0 + kPassWeightRows <= n) {
        StreamWeightRows<kPassWeightRows>(a, b, m, n, k, j0, c, accumulate);
      } else {
        for (int64_t j = j0; j < n; ++j) StreamWeightRows<1>(a, b, m, n, k, j, c, accumulate);
      }
    }
  });
}
#endif

}  // namespace

void MatmulBT(const float* a, const float* b, int64_t m, int64_t n, int64_t k, float* c,
              bool accumulate) {
  TP_CHECK(m >= 0 && n >= 0 && k >= 0);
  TP_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX);  // blasint is 32-bit in Debian's build.
  if (m == 0 || n == 0) return;
  if (k == 0) {  // An empty sum; some BLAS builds reject k == 0 with lda >= 1 checks.
    if (!accumulate) std::fill(c, c + m * n, 0.0f);
    return;
  }
#if defined(__x86_64__)
  if (m <= kStreamedRowsMax && HasAvx512()) {
    StreamedMatmulBT(a, b, m, n, k, c, accumulate);
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(k), b,
              static_cast<blasint>(k), accumulate ? 1.0f : 0.0f, c, static_cast<blasint>(n));
}

}  // namespace tpserve::cpu
