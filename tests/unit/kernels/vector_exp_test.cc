#include "kernels/cpu/vector_exp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tpserve::cpu {
namespace {

#if defined(__x86_64__)
// Distance in units in the last place between two positive floats.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(static_cast<int64_t>(ia) - ib);
}

__attribute__((target("avx512f"))) void ExpOf16(const float* x, float* y) {
  _mm512_storeu_ps(y, ExpNonPositive(_mm512_loadu_ps(x)));
}

// Against double-precision exp rounded to float, over [-87, 0] in 2^20 steps: within 2 ulp.
TEST(VectorExpTest, WithinTwoUlpOfExpOverTheSoftmaxRange) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512 on this CPU";
  int64_t worst = 0;
  float worst_x = 0;
  constexpr int kSteps = 1 << 20;
  for (int base = 0; base < kSteps; base += 16) {
    float x[16], y[16];
    for (int i = 0; i < 16; ++i) x[i] = -87.0f * static_cast<float>(base + i) / kSteps;
    ExpOf16(x, y);
    for (int i = 0; i < 16; ++i) {
      const float want = static_cast<float>(std::exp(static_cast<double>(x[i])));
      const int64_t d = UlpDistance(y[i], want);
      if (d > worst) {
        worst = d;
        worst_x = x[i];
      }
    }
  }
  EXPECT_LE(worst, 2) << "at x = " << worst_x;
  float zero[16] = {}, one[16];
  ExpOf16(zero, one);
  EXPECT_EQ(one[0], 1.0f);
  float far[16], tiny[16];
  for (float& v : far) v = -1000.0f;
  ExpOf16(far, tiny);
  EXPECT_GE(tiny[0], 0.0f);
  EXPECT_LT(tiny[0], 1e-37f);
}
#endif

}  // namespace
}  // namespace tpserve::cpu
