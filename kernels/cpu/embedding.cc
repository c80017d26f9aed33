#include "kernels/cpu/embedding.h"

#include <cstring>

#include "common/check.h"

namespace tpserve::cpu {

void Embedding(const float* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n,
               float* out) {
  TP_CHECK(vocab > 0 && hidden > 0 && n >= 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    TP_CHECK_MSG(id >= 0 && id < vocab, "token id out of range");
    std::memcpy(out + i * hidden, table + id * hidden, hidden * sizeof(float));
  }
}

}  // namespace tpserve::cpu
