#include "kernels/cpu/rope.h"

#include <cmath>

#include "common/check.h"
#include "kernels/cpu/parallel_for.h"

namespace tpserve::cpu {

void ApplyRope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads,
               int64_t head_dim, int64_t rope_dims, const double* inv_freq, RopeStyle style) {
  TP_CHECK(num_tokens >= 0 && num_heads > 0 && head_dim > 0);
  TP_CHECK(rope_dims > 0 && rope_dims % 2 == 0 && rope_dims <= head_dim);
  TP_CHECK(inv_freq != nullptr);
  const int64_t half = rope_dims / 2;
  // Pair i is (x[first * i], x[first * i + second]).
  const bool adjacent = style == RopeStyle::kAdjacentPairs;
  const int64_t first = adjacent ? 2 : 1;
  const int64_t second = adjacent ? 1 : half;
  const int64_t token_stride = num_heads * head_dim;

  const auto rotate = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const double pos = static_cast<double>(positions[t]);
      float* xt = x + t * token_stride;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * inv_freq[i];
        const float c = static_cast<float>(std::cos(angle));
        const float s = static_cast<float>(std::sin(angle));
        const int64_t i0 = first * i;
        const int64_t i1 = i0 + second;
        for (int64_t h = 0; h < num_heads; ++h) {
          float* xh = xt + h * head_dim;
          const float x0 = xh[i0];
          const float x1 = xh[i1];
          xh[i0] = x0 * c - x1 * s;
          xh[i1] = x0 * s + x1 * c;
        }
      }
    }
  };
  // Small steps (decode) rotate on the calling thread: waking the pool costs more.
  if (num_tokens * token_stride < (int64_t{1} << 16)) {
    rotate(0, num_tokens);
  } else {
    ParallelFor(num_tokens, FewChunksPerThread(num_tokens), rotate);
  }
}

}  // namespace tpserve::cpu
