#include "kernels/cpu/gelu_tanh_mul.h"

#include <cmath>

#include "common/check.h"
#include "kernels/cpu/vector_exp.h"

namespace tpserve::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;

float GeluTanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

#if defined(__x86_64__)
// tanh(u) from t = e^(-2|u|) (never an overflowing exponential): (1 - t) / (1 + t), signed as u.
__attribute__((target("avx512f"))) void GeluTanhMulAvx512(const float* gate, const float* up,
                                                          int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(gate + i);
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 u = _mm512_mul_ps(_mm512_set1_ps(kSqrt2OverPi),
                                   _mm512_add_ps(x, _mm512_mul_ps(_mm512_set1_ps(0.044715f), x3)));
    const __m512 t = ExpNonPositive(_mm512_mul_ps(_mm512_set1_ps(-2.0f), _mm512_abs_ps(u)));
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 tanh = _mm512_div_ps(_mm512_sub_ps(one, t), _mm512_add_ps(one, t));
    const __mmask16 negative = _mm512_cmp_ps_mask(u, _mm512_setzero_ps(), _CMP_LT_OQ);
    tanh = _mm512_mask_sub_ps(tanh, negative, _mm512_setzero_ps(), tanh);
    const __m512 gelu =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(one, tanh));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(gelu, _mm512_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = GeluTanh(gate[i]) * up[i];
}
#endif

}  // namespace

void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out) {
  TP_CHECK(n >= 0);
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return GeluTanhMulAvx512(gate, up, n, out);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = GeluTanh(gate[i]) * up[i];
}

}  // namespace tpserve::cpu
