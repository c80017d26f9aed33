// Short fp32 vector loops the kernels share, written in fixed chunks of 8 plus a scalar tail: GCC
// vectorizes loops of this shape without -ffast-math (which it would need to reorder a single
// running sum), and the kernels' -O3 keeps them in registers.
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// a . b over n floats, with eight independent partial sums.
inline float Dot(const float* a, const float* b, int64_t n) {
  float partial[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) partial[j] += a[i + j] * b[i + j];
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7])) + tail;
}

// y[:] += w * x[:] over n floats; x and y do not overlap.
inline void Axpy(float w, const float* __restrict x, float* __restrict y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) y[i + j] += w * x[i + j];
  }
  for (; i < n; ++i) y[i] += w * x[i];
}

// y[:] = w * x[:] over n floats; x and y are the same array or do not overlap.
inline void Scale(float w, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) y[i + j] = w * x[i + j];
  }
  for (; i < n; ++i) y[i] = w * x[i];
}

}  // namespace tpserve::cpu
