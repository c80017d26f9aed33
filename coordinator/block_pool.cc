#include "coordinator/block_pool.h"

#include "common/check.h"

namespace tpserve {

BlockPool::BlockPool(int32_t num_blocks) : in_use_(num_blocks, false) {
  TP_CHECK(num_blocks >= 0);
  for (int32_t id = 0; id < num_blocks; ++id) free_.push_back(id);
}

std::optional<std::vector<int32_t>> BlockPool::Allocate(int32_t n) {
  TP_CHECK(n >= 0);
  if (n > num_free()) return std::nullopt;
  std::vector<int32_t> ids(free_.begin(), free_.begin() + n);
  free_.erase(free_.begin(), free_.begin() + n);
  for (int32_t id : ids) in_use_[id] = true;
  return ids;
}

void BlockPool::Free(absl::Span<const int32_t> ids) {
  for (int32_t id : ids) {
    TP_CHECK(id >= 0 && id < num_blocks());
    TP_CHECK_MSG(in_use_[id], "block freed twice");
    in_use_[id] = false;
    free_.push_back(id);
  }
}

}  // namespace tpserve
