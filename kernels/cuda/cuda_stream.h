// RAII owners of a CUDA stream and a CUDA event (after TensorRT-LLM's runtime/cudaStream.h).
//
// Both are created on the device that is current at Create and remember it; the destructor
// releases the handle on that device. Creation fails with a Status (no device, out of resources);
// destruction never fails loudly (see Release below). Move-only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cuda_check.h"

namespace tpserve::cuda {

namespace internal {

// Runs `release` with `device` current, restoring the caller's device afterwards; reports (but
// does not abort on) a failure. Teardown failures are not fatal: at process exit the runtime may
// already be unloading, and after a device fault every call returns that fault, which whoever
// synchronized first has already reported.
template <typename Release>
void ReleaseOnDevice(int device, const char* what, Release release) {
  int current = -1;
  const bool switch_device = cudaGetDevice(&current) == cudaSuccess && current != device;
  if (switch_device) cudaSetDevice(device);
  const cudaError_t error = release();
  if (switch_device) cudaSetDevice(current);
  if (error != cudaSuccess && error != cudaErrorCudartUnloading) {
    std::fprintf(stderr, "%s failed: %s (%s)\n", what, cudaGetErrorString(error),
                 cudaGetErrorName(error));
  }
}

}  // namespace internal

class CudaEvent {
 public:
  // An event on the current device. The default flags skip timing, which makes record and wait
  // cheaper; pass cudaEventDefault for an event usable with ElapsedMs.
  static absl::StatusOr<CudaEvent> Create(unsigned int flags = cudaEventDisableTiming) {
    int device = 0;
    absl::Status status = CudaStatus(cudaGetDevice(&device), "cudaGetDevice");
    if (!status.ok()) return status;
    cudaEvent_t event = nullptr;
    status = CudaStatus(cudaEventCreateWithFlags(&event, flags), "cudaEventCreate");
    if (!status.ok()) {
      cudaGetLastError();
      return status;
    }
    return CudaEvent(event, device);
  }

  ~CudaEvent() { Destroy(); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  CudaEvent(CudaEvent&& other) noexcept
      : event_(std::exchange(other.event_, nullptr)), device_(other.device_) {}
  CudaEvent& operator=(CudaEvent&& other) noexcept {
    if (this != &other) {
      Destroy();
      event_ = std::exchange(other.event_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }

  cudaEvent_t get() const { return event_; }
  int device() const { return device_; }

  // Captures the work queued on `stream` so far (a stream of the same device).
  absl::Status Record(cudaStream_t stream) {
    return CudaStatus(cudaEventRecord(event_, stream), "cudaEventRecord");
  }
  // Blocks the calling thread until the recorded work has finished.
  absl::Status Synchronize() const {
    return CudaStatus(cudaEventSynchronize(event_), "cudaEventSynchronize");
  }
  // Whether the recorded work has finished, without blocking.
  absl::StatusOr<bool> IsDone() const {
    const cudaError_t error = cudaEventQuery(event_);
    if (error == cudaErrorNotReady) {
      cudaGetLastError();  // "not ready" is an answer, not an error to report later
      return false;
    }
    absl::Status status = CudaStatus(error, "cudaEventQuery");
    if (!status.ok()) return status;
    return true;
  }
  // Milliseconds between two recorded timing events (both created with cudaEventDefault).
  static absl::StatusOr<float> ElapsedMs(const CudaEvent& start, const CudaEvent& end) {
    float ms = 0.0f;
    absl::Status status =
        CudaStatus(cudaEventElapsedTime(&ms, start.event_, end.event_), "cudaEventElapsedTime");
    if (!status.ok()) return status;
    return ms;
  }

 private:
  CudaEvent(cudaEvent_t event, int device) : event_(event), device_(device) {}
  void Destroy() {
    if (event_ == nullptr) return;
    internal::ReleaseOnDevice(device_, "cudaEventDestroy",
                              [this] { return cudaEventDestroy(event_); });
    event_ = nullptr;
  }

  cudaEvent_t event_ = nullptr;
  int device_ = 0;
};

class CudaStream {
 public:
  // A stream on the current device. Non-blocking by default: it does not synchronize with the
  // legacy default stream, so that a stray cudaMemcpy elsewhere cannot serialize the forward
  // pass. Priority: lower numbers run first (cudaDeviceGetStreamPriorityRange); 0 is the default.
  static absl::StatusOr<CudaStream> Create(unsigned int flags = cudaStreamNonBlocking,
                                           int priority = 0) {
    int device = 0;
    absl::Status status = CudaStatus(cudaGetDevice(&device), "cudaGetDevice");
    if (!status.ok()) return status;
    cudaStream_t stream = nullptr;
    status = CudaStatus(cudaStreamCreateWithPriority(&stream, flags, priority),
                        "cudaStreamCreateWithPriority");
    if (!status.ok()) {
      cudaGetLastError();
      return status;
    }
    return CudaStream(stream, device);
  }

  // cudaStreamDestroy does not wait: work already queued still runs to completion.
  ~CudaStream() { Destroy(); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  CudaStream(CudaStream&& other) noexcept
      : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}
  CudaStream& operator=(CudaStream&& other) noexcept {
    if (this != &other) {
      Destroy();
      stream_ = std::exchange(other.stream_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }

  // Blocks the calling thread until all work queued on the stream has finished; returns the
  // first error of that work (a faulting kernel shows up here).
  absl::Status Synchronize() const {
    return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  // Work queued on this stream from now on waits for `event`'s recorded work (which may be on
  // another stream); the host does not block.
  absl::Status Wait(const CudaEvent& event) const {
    return CudaStatus(cudaStreamWaitEvent(stream_, event.get(), 0), "cudaStreamWaitEvent");
  }

 private:
  CudaStream(cudaStream_t stream, int device) : stream_(stream), device_(device) {}
  void Destroy() {
    if (stream_ == nullptr) return;
    internal::ReleaseOnDevice(device_, "cudaStreamDestroy",
                              [this] { return cudaStreamDestroy(stream_); });
    stream_ = nullptr;
  }

  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

}  // namespace tpserve::cuda
