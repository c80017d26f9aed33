#include "kernels/cpu/lora_product.h"

#include "common/check.h"
#include "kernels/cpu/vector_ops.h"

namespace tpserve::cpu {

void LoraProduct(const float* a, const float* bt, int64_t rank, int64_t in, int64_t out,
                 const float* const* x, float* const* y, int64_t tokens) {
  TP_CHECK(rank <= kMaxLoraProductRank && tokens <= kMaxLoraProductTokens);
  float ax[kMaxLoraProductTokens][kMaxLoraProductRank];
  for (int64_t k = 0; k < rank; ++k) {
    for (int64_t t = 0; t < tokens; ++t) ax[t][k] = Dot(a + k * in, x[t], in);
  }
  for (int64_t k = 0; k < rank; ++k) {
    for (int64_t t = 0; t < tokens; ++t) Axpy(ax[t][k], bt + k * out, y[t], out);
  }
}

}  // namespace tpserve::cpu
