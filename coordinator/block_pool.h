// The coordinator's pool of KV-cache block ids (DESIGN.md "KV cache"). Ids are global: every
// rank stores its own heads of block `id` under the same id, so one pool here stands for the
// pools of all ranks. Running out is normal and answered with an empty optional.
//
// Not thread-safe: owned by the engine thread.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/types/span.h"

namespace tpserve {

class BlockPool {
 public:
  // Ids 0 .. num_blocks-1, all free.
  explicit BlockPool(int32_t num_blocks);

  // `n` free ids, least recently freed first, or nullopt (nothing taken) when fewer are free.
  std::optional<std::vector<int32_t>> Allocate(int32_t n);
  // Returns ids to the pool. Freeing an id that is not allocated is a bug (checked).
  void Free(absl::Span<const int32_t> ids);

  int32_t num_blocks() const { return static_cast<int32_t>(in_use_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }

 private:
  std::deque<int32_t> free_;  // FIFO: freed ids are reused last
  std::vector<bool> in_use_;  // [num_blocks]
};

}  // namespace tpserve
