// A Communicator that forwards to a replaceable one. The loaded model keeps a pointer to its
// communicator for its whole life; when the coordinator re-forms the collective group (a new
// Init with the same rank and world size), the worker swaps the group underneath instead of
// reloading the shard. Only this interface is swapped: the CUDA model holds its
// DeviceCommunicator directly, and WorkerServer keeps that valid for the model's life.
//
// Thread-safety: none; used from the worker's execution thread only.
#pragma once

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"

namespace tpserve {

class SwappableCommunicator : public Communicator {
 public:
  explicit SwappableCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  void Reset(std::unique_ptr<Communicator> inner) { inner_ = std::move(inner); }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  absl::Status AllReduceSum(float* data, int64_t count) override {
    return inner_->AllReduceSum(data, count);
  }
  absl::Status GatherToRoot(const float* send, absl::Span<const int64_t> counts,
                            float* recv) override {
    return inner_->GatherToRoot(send, counts, recv);
  }

 private:
  std::unique_ptr<Communicator> inner_;  // never null
};

}  // namespace tpserve
