// The LoRA adapters a cluster serves, changed at run time through the admin API: the names
// requests may use (Serving), what the workers hold (OnWorkers, which every Init sends again), and
// the two changes, one at a time:
//
//   Load(name, path)   a free slot; every rank loads the adapter (LoadAdapter); then the engine
//                      admits requests for it (AdapterGate::Open) and requests may name it
//   Unload(name)       requests may no longer name it; the engine admits none (Close); once its
//                      last sequence is gone (running ones finish, none is cut), every rank
//                      empties the slot (UnloadAdapter) and the prefix cache drops what no
//                      request holds, the adapter's prefixes with it (they are keyed by slot)
//
// A generation per loading keeps a request parsed for one adapter from running with another loaded
// into the same slot since. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/lora_modules.h"

namespace tpserve {

class Engine;
class WorkerPool;

class LoraManager {
 public:
  // `initial`: the adapters of --lora-modules, loaded with the shards; `max_loras` slots.
  LoraManager(std::string served_name, std::vector<LoraModule> initial, int32_t max_loras);

  // Once the engine runs: its gate opens the initial adapters. Both must outlive the manager's use.
  void SetEngine(Engine* engine, WorkerPool* pool);

  std::vector<LoraModule> Serving() const;
  std::vector<LoraModule> OnWorkers() const;
  int32_t max_loras() const { return max_loras_; }

  // NOT_FOUND / ALREADY_EXISTS / RESOURCE_EXHAUSTED naming the adapter; a worker's refusal as it
  // came; UNAVAILABLE before the engine runs.
  absl::StatusOr<LoraModule> Load(const std::string& name, const std::string& path,
                                  absl::Duration timeout);
  // DEADLINE_EXCEEDED when its sequences have not finished within `drain` (the adapter then
  // stays closed to new requests and loaded, and a later Unload finishes the job).
  absl::Status Unload(const std::string& name, absl::Duration drain, absl::Duration timeout);

 private:
  enum class State { kLoading, kServing, kUnloading };
  struct Entry {
    LoraModule module;
    State state = State::kServing;
  };
  Entry* Find(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Erase(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::string served_name_;
  const int32_t max_loras_;
  absl::Mutex change_mutex_;  // one Load or Unload at a time
  mutable absl::Mutex mutex_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mutex_);
  int64_t next_generation_ ABSL_GUARDED_BY(mutex_) = 0;
  std::atomic<Engine*> engine_{nullptr};
  std::atomic<WorkerPool*> pool_{nullptr};
};

}  // namespace tpserve
