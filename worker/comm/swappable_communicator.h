// A Communicator that forwards to a replaceable one. The loaded model keeps a pointer to its
// communicator for its whole life; when the coordinator re-forms the collective group (a new
// Init with the same rank and world size), the worker swaps the group underneath instead of
// reloading the shard. Only this interface is swapped: the CUDA model holds its
// DeviceCommunicator directly, and WorkerServer keeps that valid for the model's life.
//
// Thread-safety: Abort from any thread (it reaches the communicator installed at the time);
// everything else from the worker's execution thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/communicator.h"

namespace tpserve {

class SwappableCommunicator : public Communicator {
 public:
  explicit SwappableCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  // The old communicator is destroyed after the swap, outside the lock Abort takes.
  void Reset(std::unique_ptr<Communicator> inner) {
    {
      absl::MutexLock lock(&abort_mutex_);
      inner_.swap(inner);
    }
  }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  absl::Status AllReduceSum(float* data, int64_t count) override {
    const Timed timed(this);
    return inner_->AllReduceSum(data, count);
  }
  absl::Status GatherToRoot(const float* send, absl::Span<const int64_t> counts,
                            float* recv) override {
    const Timed timed(this);
    return inner_->GatherToRoot(send, counts, recv);
  }
  // Collectives run through this object since it was made, and the seconds they took (for the
  // worker's metrics; any thread).
  int64_t collectives() const { return collectives_.load(std::memory_order_relaxed); }
  double collective_seconds() const {
    return static_cast<double>(collective_ns_.load(std::memory_order_relaxed)) * 1e-9;
  }
  void Abort(absl::string_view reason) override {
    absl::MutexLock lock(&abort_mutex_);
    inner_->Abort(reason);
  }

 private:
  // Adds a collective's time to the totals when it ends.
  class Timed {
   public:
    explicit Timed(SwappableCommunicator* comm)
        : comm_(comm), start_(std::chrono::steady_clock::now()) {}
    ~Timed() {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now() - start_);
      comm_->collective_ns_.fetch_add(ns.count(), std::memory_order_relaxed);
      comm_->collectives_.fetch_add(1, std::memory_order_relaxed);
    }

   private:
    SwappableCommunicator* const comm_;
    const std::chrono::steady_clock::time_point start_;
  };

  std::atomic<int64_t> collectives_{0};
  std::atomic<int64_t> collective_ns_{0};
  absl::Mutex abort_mutex_;  // held by Reset to write inner_, by Abort to read it
  std::unique_ptr<Communicator> inner_;  // never null
};

}  // namespace tpserve
