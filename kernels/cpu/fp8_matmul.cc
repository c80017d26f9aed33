#include "kernels/cpu/fp8_matmul.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "kernels/cpu/fp8_e4m3.h"

namespace tpserve::cpu {

void QuantizeRowsE4m3(const float* x, int64_t rows, int64_t cols, uint8_t* codes, float* scales) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
    const float scale = amax > 0.0f ? amax / kE4m3Max : 1.0f;
    scales[r] = scale;
    QuantizeE4m3(row, cols, scale, codes + r * cols);
  }
}

void MatmulE4m3BT(const uint8_t* a, const float* a_scales, const uint8_t* b, const float* b_scales,
                  int64_t m, int64_t n, int64_t k, float* c) {
  std::array<float, 256> value;
  for (int code = 0; code < 256; ++code) value[code] = FromE4m3(static_cast<uint8_t>(code));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int64_t t = 0; t < k; ++t) sum += value[a[i * k + t]] * value[b[j * k + t]];
      c[i * n + j] = a_scales[i] * b_scales[j] * sum;
    }
  }
}

}  // namespace tpserve::cpu
