#include "coordinator/block_pool.h"

#include "common/check.h"

namespace tpserve {

BlockPool::BlockPool(int32_t num_blocks) {
  TP_CHECK(num_blocks >= 0);
  ref_counts_.assign(num_blocks, 0);
  for (int32_t id = 0; id < num_blocks; ++id) free_.push_back(id);
}

std::optional<std::vector<int32_t>> BlockPool::Allocate(int32_t n) {
  TP_CHECK(n >= 0);
  if (n > num_free()) return std::nullopt;
  std::vector<int32_t> ids(free_.begin(), free_.begin() + n);
  free_.erase(free_.begin(), free_.begin() + n);
  for (int32_t id : ids) ref_counts_[id] = 1;
  return ids;
}

void BlockPool::Ref(absl::Span<const int32_t> ids) {
  for (int32_t id : ids) {
    TP_CHECK(id >= 0 && id < num_blocks());
    TP_CHECK_MSG(ref_counts_[id] > 0, "Ref on a free block");
    ++ref_counts_[id];
  }
}

void BlockPool::Release(absl::Span<const int32_t> ids) {
  for (int32_t id : ids) {
    TP_CHECK(id >= 0 && id < num_blocks());
    TP_CHECK_MSG(ref_counts_[id] > 0, "released a free block");
    if (--ref_counts_[id] == 0) free_.push_back(id);
  }
}

int32_t BlockPool::ref_count(int32_t id) const {
  TP_CHECK(id >= 0 && id < num_blocks());
  return ref_counts_[id];
}

}  // namespace tpserve
