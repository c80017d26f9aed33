// The coordinator's pool of KV-cache block ids (DESIGN.md "KV cache"). Ids are global: every
// rank stores its own heads of block `id` under the same id, so one pool here stands for the
// pools of all ranks.
//
// Blocks are reference counted because the prefix cache shares them: a running sequence holds
// one reference on every block of its block table, and the RadixCache holds one on every block
// in its tree. A block is free exactly when its count is 0. Running out is normal and answered
// with an empty optional; releasing a block that is not held is a bug (checked).
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

  // `n` free ids, least recently freed first, each with reference count 1; or nullopt (nothing
  // taken) when fewer than `n` are free.
  std::optional<std::vector<int32_t>> Allocate(int32_t n);
  // One more reference on each id; every id must be held (count > 0).
  void Ref(absl::Span<const int32_t> ids);
  // One reference fewer on each id; an id whose count reaches 0 is free again (appended to the
  // free list, so it is reused last).
  void Release(absl::Span<const int32_t> ids);

  int32_t ref_count(int32_t id) const;
  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }

 private:
  std::deque<int32_t> free_;         // FIFO: freed ids are reused last
  std::vector<int32_t> ref_counts_;  // [num_blocks]
};

}  // namespace tpserve
