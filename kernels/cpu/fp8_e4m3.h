// FP8 E4M3 ("e4m3fn": 4 exponent bits, bias 7, 3 mantissa bits, no infinities, 0x7F and 0xFF the
// only NaNs, largest finite 448), as NVIDIA's cvt.rn.satfinite.e4m3x2.f32 converts: round to
// nearest even, finite values beyond +-448 saturate to +-448, NaN stays NaN. These are the
// reference the GPU kernels are tested against and what the CPU's FP8 KV cache stores.
#pragma once

#include <cstdint>

namespace tpserve::cpu {

inline constexpr float kE4m3Max = 448.0f;

// x rounded to the nearest E4M3 value (ties to even), saturating; NaN -> 0x7F.
uint8_t ToE4m3(float x);

// The value of an E4M3 code: normals (-1)^s 2^(e-7) (1 + m/8), subnormals (-1)^s 2^-6 m/8; NaN for
// 0x7F and 0xFF.
float FromE4m3(uint8_t code);

// ToE4m3(x[i] / scale) for n values.
void QuantizeE4m3(const float* x, int64_t n, float scale, uint8_t* out);

}  // namespace tpserve::cpu
