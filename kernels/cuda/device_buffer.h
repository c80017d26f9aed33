// DeviceBuffer<T>: owns one cudaMalloc allocation of `size()` elements of T on one device.
//
// Device memory only, never managed (unified) memory: every host<->device transfer in tpserve is an
// explicit copy on a stream, so that page migration never stalls a kernel behind our back.
// Allocation failures (no device, out of memory) are a Status; the buffer is move-only and frees
// its memory in the destructor.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/cuda_check.h"

namespace tpserve::cuda {

template <typename T>
class DeviceBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "device memory is filled by memcpy");

 public:
  // An empty buffer: data() == nullptr, size() == 0.
  DeviceBuffer() = default;

  // `count` elements on the current device, uninitialized. count == 0 gives an empty buffer
  // without calling the driver. INVALID_ARGUMENT for a negative count or a byte size that
  // overflows; otherwise cudaMalloc's error through CudaStatus (FAILED_PRECONDITION without a
  // usable device, RESOURCE_EXHAUSTED when the device is full).
  static absl::StatusOr<DeviceBuffer> Allocate(int64_t count) {
    if (count < 0 ||
        static_cast<uint64_t>(count) > std::numeric_limits<size_t>::max() / sizeof(T)) {
      return absl::InvalidArgumentError(absl::StrCat("DeviceBuffer: cannot allocate ", count,
                                                     " elements of ", sizeof(T), " bytes"));
    }
    DeviceBuffer buffer;
    if (count == 0) return buffer;
    void* data = nullptr;
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    const cudaError_t error = cudaMalloc(&data, bytes);
    if (error != cudaSuccess) {
      // The error is also left as the thread's "last error"; clear it so that the next launch
      // check (cudaGetLastError) does not blame an unrelated kernel.
      cudaGetLastError();
      return CudaStatus(error, absl::StrCat("cudaMalloc(", bytes, " bytes)"));
    }
    buffer.data_ = static_cast<T*>(data);
    buffer.size_ = count;
    return buffer;
  }

  ~DeviceBuffer() { Free(); }

  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Free();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return size_; }
  int64_t bytes() const { return size_ * static_cast<int64_t>(sizeof(T)); }
  bool empty() const { return size_ == 0; }

  // Copies `host` into elements [0, host.size()) and returns when the copy has finished. The copy
  // is ordered on `stream` (after the work already queued there), so a kernel queued earlier on
  // that stream never sees the new data. INVALID_ARGUMENT when host.size() > size().
  // Blocking, from pageable memory: for loading and tests, not for the per-step path.
  absl::Status CopyFromHost(absl::Span<const T> host, cudaStream_t stream = nullptr) {
    if (static_cast<int64_t>(host.size()) > size_) {
      return absl::InvalidArgumentError(absl::StrCat("DeviceBuffer::CopyFromHost: ", host.size(),
                                                     " elements into a buffer of ", size_));
    }
    if (host.empty()) return absl::OkStatus();
    return Copy(data_, host.data(), host.size(), cudaMemcpyHostToDevice, stream,
                "DeviceBuffer::CopyFromHost");
  }

  // Copies elements [0, host.size()) into `host` once the work queued on `stream` before it has
  // finished (a kernel's result written on that stream is visible), and returns when the copy has
  // finished. INVALID_ARGUMENT when host.size() > size().
  absl::Status CopyToHost(absl::Span<T> host, cudaStream_t stream = nullptr) const {
    if (static_cast<int64_t>(host.size()) > size_) {
      return absl::InvalidArgumentError(absl::StrCat("DeviceBuffer::CopyToHost: ", host.size(),
                                                     " elements from a buffer of ", size_));
    }
    if (host.empty()) return absl::OkStatus();
    return Copy(host.data(), data_, host.size(), cudaMemcpyDeviceToHost, stream,
                "DeviceBuffer::CopyToHost");
  }

 private:
  static absl::Status Copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                           cudaStream_t stream, const char* what) {
    // cudaMemcpy would run on the legacy default stream, which does not wait for streams
    // created with cudaStreamNonBlocking: copy on the caller's stream and wait for it instead.
    cudaError_t error = cudaMemcpyAsync(dst, src, count * sizeof(T), kind, stream);
    if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
    if (error != cudaSuccess) cudaGetLastError();
    return CudaStatus(error, what);
  }

  void Free() {
    if (data_ == nullptr) return;
    // Not fatal: at process exit the runtime may already be unloading, and after a device fault
    // every call returns the fault, which whoever synchronized first has reported.
    const cudaError_t error = cudaFree(data_);
    if (error != cudaSuccess && error != cudaErrorCudartUnloading) {
      std::fprintf(stderr, "DeviceBuffer: cudaFree failed: %s (%s)\n", cudaGetErrorString(error),
                   cudaGetErrorName(error));
    }
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;  // [size_] on the device that was current at Allocate; null when empty
  int64_t size_ = 0;
};

}  // namespace tpserve::cuda
