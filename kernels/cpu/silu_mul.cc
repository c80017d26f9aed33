#include "kernels/cpu/silu_mul.h"

#include <cmath>

#include "common/check.h"
#include "kernels/cpu/vector_exp.h"

namespace tpserve::cpu {
namespace {

#if defined(__x86_64__)
// silu(g) = g * sigmoid(g), the sigmoid from t = e^-|g| (never an overflowing exponential):
// 1 / (1 + t) for g >= 0, t / (1 + t) below.
__attribute__((target("avx512f"))) void SiluMulAvx512(const float* gate, const float* up, int64_t n,
                                                      float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 t = ExpNonPositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));
    const __m512 denominator = _mm512_add_ps(_mm512_set1_ps(1.0f), t);
    const __mmask16 negative = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 numerator = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), negative, t);
    const __m512 sigmoid = _mm512_div_ps(numerator, denominator);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(g, sigmoid), _mm512_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}
#endif

}  // namespace

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  TP_CHECK(n >= 0);
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return SiluMulAvx512(gate, up, n, out);
#endif
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    // For g -> -inf, exp(-g) overflows to inf and g / inf = -0: the correct limit.
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace tpserve::cpu
