// A 16-wide e^x for AVX-512 kernels (attention's softmax, SiLU), where a call of expf per
// element cost more than the arithmetic around it.
#pragma once

#include "kernels/cpu/x86_intrinsics.h"

#if defined(__x86_64__)

namespace tpserve::cpu {

// e^x for x <= 0, within ~2 ulp of expf: Cephes' expf (x = n ln2 + r, |r| <= ln2 / 2, a degree-6
// polynomial in r, times 2^n). Below -87.3 it returns ~1e-38 instead of underflowing further:
// a softmax weight that small is nothing next to the largest, which is 1.
__attribute__((target("avx512f"))) inline __m512 ExpNonPositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.33654f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 poly = _mm512_set1_ps(1.9875691500e-4f);
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.3981999507e-3f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(8.3334519073e-3f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(4.1665795894e-2f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.6666665459e-1f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(5.0000001201e-1f));
  poly = _mm512_fmadd_ps(poly, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(poly, n);
}

}  // namespace tpserve::cpu

#endif  // __x86_64__
