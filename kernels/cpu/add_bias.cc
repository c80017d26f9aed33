#include "kernels/cpu/add_bias.h"

#include "common/check.h"

namespace tpserve::cpu {

void AddBias(float* x, const float* bias, int64_t rows, int64_t width) {
  TP_CHECK(rows >= 0 && width >= 0);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * width;
    for (int64_t j = 0; j < width; ++j) row[j] += bias[j];
  }
}

}  // namespace tpserve::cpu
