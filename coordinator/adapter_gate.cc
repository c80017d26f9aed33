#include "coordinator/adapter_gate.h"

#include "absl/strings/str_cat.h"

namespace tpserve {

AdapterGate::Slot& AdapterGate::At(int32_t slot) {
  if (static_cast<int32_t>(slots_.size()) <= slot) slots_.resize(slot + 1);
  return slots_[slot];
}

void AdapterGate::Open(int32_t slot, int64_t generation) {
  absl::MutexLock lock(&mutex_);
  At(slot).generation = generation;
}

void AdapterGate::Close(int32_t slot) {
  absl::MutexLock lock(&mutex_);
  At(slot).generation = 0;
}

absl::StatusOr<AdapterUse> AdapterGate::Use(int32_t slot, int64_t generation) {
  if (slot == 0) return AdapterUse();
  absl::MutexLock lock(&mutex_);
  Slot& s = At(slot);
  if (s.generation == 0 || s.generation != generation) {
    return absl::NotFoundError(
        "the LoRA adapter this request names was unloaded or replaced while it was parsed");
  }
  return AdapterUse(s.count);
}

int32_t AdapterGate::InUse(int32_t slot) const {
  absl::MutexLock lock(&mutex_);
  return slot < static_cast<int32_t>(slots_.size()) ? slots_[slot].count->load() : 0;
}

}  // namespace tpserve
