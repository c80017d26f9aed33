// Which LoRA slots requests may run with, and how many sequences run with each. An adapter is
// unloaded from the workers only once its slot is closed and none of its sequences is left, and a
// request parsed for an adapter that another has replaced in its slot since (a later generation)
// is refused rather than run with the wrong weights. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tpserve {

// One sequence's hold on its slot: counted from Use until it is destroyed. Move-only.
class AdapterUse {
 public:
  AdapterUse() = default;
  explicit AdapterUse(std::shared_ptr<std::atomic<int32_t>> count) : count_(std::move(count)) {
    if (count_ != nullptr) ++*count_;
  }
  AdapterUse(AdapterUse&& other) = default;
  AdapterUse& operator=(AdapterUse&& other) {
    Release();
    count_ = std::move(other.count_);
    return *this;
  }
  ~AdapterUse() { Release(); }

 private:
  void Release() {
    if (count_ != nullptr) --*count_;
    count_.reset();
  }
  std::shared_ptr<std::atomic<int32_t>> count_;
};

class AdapterGate {
 public:
  void Open(int32_t slot, int64_t generation);
  void Close(int32_t slot);
  // A sequence's use of `slot` (0, the base model: an uncounted one), or NOT_FOUND when the slot
  // is not open under `generation`.
  absl::StatusOr<AdapterUse> Use(int32_t slot, int64_t generation);
  // Sequences that hold `slot` now.
  int32_t InUse(int32_t slot) const;

 private:
  struct Slot {
    int64_t generation = 0;  // 0: closed
    std::shared_ptr<std::atomic<int32_t>> count = std::make_shared<std::atomic<int32_t>>(0);
  };
  Slot& At(int32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  mutable absl::Mutex mutex_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace tpserve
