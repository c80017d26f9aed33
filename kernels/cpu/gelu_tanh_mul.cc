#include "kernels/cpu/gelu_tanh_mul.h"

#include <cmath>

#include "common/check.h"

namespace tpserve::cpu {

void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out) {
  TP_CHECK(n >= 0);
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x))) * up[i];
  }
}

}  // namespace tpserve::cpu
