#include "worker/kv_cache.h"

#include "common/check.h"

namespace tpserve {

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape) {
  TP_CHECK(shape.bytes_per_element == (shape.fp8 ? 1 : static_cast<int64_t>(sizeof(float))));
  const int64_t elements = shape.num_blocks * shape.floats_per_block();
  if (shape.fp8) {
    fp8_keys_.assign(shape.num_layers, std::vector<uint8_t>(elements));
    fp8_values_.assign(shape.num_layers, std::vector<uint8_t>(elements));
  } else {
    keys_.assign(shape.num_layers, std::vector<float>(elements));
    values_.assign(shape.num_layers, std::vector<float>(elements));
  }
}

}  // namespace tpserve
