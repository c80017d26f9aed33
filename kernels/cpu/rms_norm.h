// RMSNorm as in Llama (fp32, CPU).
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// For each row r: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:].
// The sum of squares is accumulated in double (as ggml does); the scaling is done in fp32.
//   x:      [rows, dim]
//   weight: [dim]
//   out:    [rows, dim]; may be the same pointer as x (in place), must not partially overlap it.
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out);

// The fused residual step of a Llama layer:
//   residual[r, :] += x[r, :];  out[r, :] = RmsNorm(residual[r, :]) * weight.
//   residual: [rows, dim], updated in place (the stream that carries on to the next layer)
//   x:        [rows, dim] (the attention or MLP output being added)
//   weight:   [dim]
//   out:      [rows, dim]; may be the same pointer as x, must not overlap residual.
void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows, int64_t dim,
                float eps, float* out);

}  // namespace tpserve::cpu
