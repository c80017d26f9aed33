#include "kernels/cpu/rms_norm.h"

#include <cmath>

#include "common/check.h"
#include "kernels/cpu/parallel_for.h"

namespace tpserve::cpu {
namespace {

// out[:] = x[:] * (1 / sqrt(mean(x^2) + eps)) * weight[:] for one row of `dim` values.
void NormalizeRow(const float* x, const float* weight, int64_t dim, float eps, float* out) {
  double sum_squares = 0.0;
  for (int64_t i = 0; i < dim; ++i) sum_squares += static_cast<double>(x[i]) * x[i];
  const float mean = static_cast<float>(sum_squares / static_cast<double>(dim));
  const float inv_rms = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < dim; ++i) out[i] = x[i] * inv_rms * weight[i];
}

// A decode step's few rows stay on the calling thread (one chunk); prefill's spread.
constexpr int64_t kRowsPerChunk = 16;

}  // namespace

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
             float* out) {
  TP_CHECK(rows >= 0 && dim > 0);
  ParallelFor(rows, kRowsPerChunk, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      NormalizeRow(x + r * dim, weight, dim, eps, out + r * dim);
  });
}

void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows, int64_t dim,
                float eps, float* out) {
  TP_CHECK(rows >= 0 && dim > 0);
  for (int64_t r = 0; r < rows; ++r) {
    float* res = residual + r * dim;
    const float* add = x + r * dim;
    for (int64_t i = 0; i < dim; ++i) res[i] += add[i];  // Reads all of x's row before out's.
    NormalizeRow(res, weight, dim, eps, out + r * dim);
  }
}

}  // namespace tpserve::cpu
