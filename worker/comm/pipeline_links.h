// A pipeline stage's links to its neighbours: the hidden states of a step arrive from the previous
// stage's rank of the same tensor-parallel rank and leave for the next stage's. Each link is a
// group of two ranks (shared memory between ranks of one host, else Gloo, chosen as a stage's
// all-reduce transport is) whose rank 0 is the receiver, and a transfer is that group's gather:
// every collective transport already moves a gather point to point.
//
// CUDA ranks' links are two-rank NCCL groups: the CUDA model enqueues its transfers on them itself,
// on device memory (device_from_previous / device_to_next), and Receive and Send are for CPU ranks.
//
// Thread-safety: Abort from any thread; everything else from the worker's execution thread.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/communicator.h"

namespace tpserve {

class DeviceCommunicator;  // worker/comm/device_communicator.h, CUDA builds only

class PipelineLinks {
 public:
  // Installs a re-formed group's links (null: none that way), with their device side on CUDA
  // ranks (the same objects). A CPU model keeps a pointer to this object, not to the links, so a
  // re-formed group needs no reload; a CUDA model is reloaded with every group.
  void Reset(std::unique_ptr<Communicator> from_previous, std::unique_ptr<Communicator> to_next,
             DeviceCommunicator* device_from_previous = nullptr,
             DeviceCommunicator* device_to_next = nullptr);
  DeviceCommunicator* device_from_previous() const { return device_from_previous_; }
  DeviceCommunicator* device_to_next() const { return device_to_next_; }

  // The previous stage's hidden states of this step, `count` floats. FAILED_PRECONDITION on the
  // first stage; the transport's error when the link breaks or is aborted.
  absl::Status Receive(float* data, int64_t count);
  // This stage's hidden states to the next stage. FAILED_PRECONDITION on the last stage.
  absl::Status Send(const float* data, int64_t count);

  // Breaks both links: a Receive or Send in progress or to come fails.
  void Abort(absl::string_view reason);

 private:
  absl::Mutex mu_;  // held by Reset to write the links, by Abort to read them
  std::unique_ptr<Communicator> from_previous_;
  std::unique_ptr<Communicator> to_next_;
  DeviceCommunicator* device_from_previous_ = nullptr;
  DeviceCommunicator* device_to_next_ = nullptr;
};

}  // namespace tpserve
