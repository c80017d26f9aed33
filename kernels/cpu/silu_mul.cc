#include "kernels/cpu/silu_mul.h"

#include <cmath>

#include "common/check.h"

namespace tpserve::cpu {

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  TP_CHECK(n >= 0);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    // For g -> -inf, exp(-g) overflows to inf and g / inf = -0: the correct limit.
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace tpserve::cpu
