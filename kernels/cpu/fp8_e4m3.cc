#include "kernels/cpu/fp8_e4m3.h"

#include <bit>
#include <cmath>

namespace tpserve::cpu {

uint8_t ToE4m3(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  if (std::isnan(x)) return 0x7F;
  const float a = std::fabs(x);
  if (a >= kE4m3Max) return sign | 0x7E;  // satfinite: 448 = e 15, m 6
  // Below 2^-6 the codes are subnormal, steps of 2^-9: round a / 2^-9 to an integer (even on
  // ties, the FPU's default mode); 8 there is the smallest normal, which the encoding continues.
  if (a < 0.015625f) {
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  // Normal: keep 3 of fp32's 23 mantissa bits, rounding the other 20 to nearest even; a carry
  // into the exponent is the next binade, as it should be.
  const uint32_t abs_bits = bits & 0x7FFFFFFF;
  const uint32_t lsb = (abs_bits >> 20) & 1;
  const uint32_t rounded = (abs_bits + 0x7FFFF + lsb) >> 20;  // exponent and 3 mantissa bits
  const uint32_t exponent = (rounded >> 3) - (127 - 7);
  // Below 448 nothing rounds past it: the largest code here is 0x7E.
  return sign | static_cast<uint8_t>((exponent << 3) | (rounded & 7));
}

float FromE4m3(uint8_t code) {
  const uint32_t magnitude = code & 0x7F;
  if (magnitude == 0x7F) return std::nanf("");
  float value;
  if (magnitude < 8) {
    value = static_cast<float>(magnitude) * 0x1p-9f;
  } else {
    value = std::bit_cast<float>((magnitude << 20) + ((127 - 7) << 23));
  }
  return (code & 0x80) != 0 ? -value : value;
}

void QuantizeE4m3(const float* x, int64_t n, float scale, uint8_t* out) {
  const float inverse = 1.0f / scale;
  for (int64_t i = 0; i < n; ++i) out[i] = ToE4m3(x[i] * inverse);
}

}  // namespace tpserve::cpu
