#include "worker/kv_cache.h"

#include "common/check.h"

namespace tpserve {

KvCacheShape KvCacheShape::For(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim,
                               int64_t block_size, bool cuda, bool fp8) {
  KvCacheShape shape;
  shape.num_layers = num_layers;
  shape.num_kv_heads = num_kv_heads;
  shape.head_dim = head_dim;
  shape.block_size = block_size;
  shape.fp8 = fp8;
  shape.bytes_per_element = fp8 ? 1 : cuda ? 2 : sizeof(float);
  return shape;
}

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
