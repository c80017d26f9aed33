#include "worker/kv_cache.h"

namespace tpserve {

KvCache::KvCache(const KvCacheShape& shape)
    : shape_(shape),
      keys_(shape.num_layers, std::vector<float>(shape.num_blocks * shape.floats_per_block())),
      values_(shape.num_layers, std::vector<float>(shape.num_blocks * shape.floats_per_block())) {}

}  // namespace tpserve
