// A projection's bias added to each of its output rows (fp32, CPU): Qwen2's q/k/v biases.
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// x[r, j] += bias[j] for r in [0, rows), j in [0, width).
//   x: [rows, width], contiguous; bias: [width].
void AddBias(float* x, const float* bias, int64_t rows, int64_t width);

}  // namespace tpserve::cpu
