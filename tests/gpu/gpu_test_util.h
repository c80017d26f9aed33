// Shared by the GPU tests (ctest label `gpu`): skipping, with the reason, where no CUDA device is
// visible, device arrays for inputs and outputs, and the normalized error that backend ops are
// compared by (as llama.cpp's test-backend-ops does). Host code only; needs the CUDA runtime headers and gtest.
#pragma once

#include <cuda_runtime.h>  // cuda_runtime_api.h and the typed cudaMalloc overload
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/cuda_check.h"
#include "kernels/cuda/device_buffer.h"

namespace tpserve::gpu_test {

// A device array of T, freed on scope exit.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(int64_t count) : count_(count) {
    CUDA_CHECK(cudaMalloc(&data_, std::max<int64_t>(count, 1) * sizeof(T)));
  }
  ~DeviceArray() { CUDA_CHECK(cudaFree(data_)); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() { return data_; }
  void Upload(const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> Download() const {
    std::vector<T> host(count_);
    CUDA_CHECK(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  const int64_t count_;
  T* data_ = nullptr;
};


// The number of visible CUDA devices; 0 with the reason in `why` (when given). Any error from
// cudaGetDeviceCount (no driver, driver too old, no device) means "no device".
inline int VisibleCudaDevices(std::string* why = nullptr) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // Not sticky, but would be reported by the next launch check.
    if (why != nullptr) *why = std::string("no CUDA device: ") + cudaGetErrorString(error);
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "no CUDA device: 0 devices visible";
  return count;
}

// Why a test that needs `min_devices` devices cannot run here, or nullopt when it can.
inline std::optional<std::string> CudaSkipReason(int min_devices = 1) {
  std::string why;
  const int devices = VisibleCudaDevices(&why);
  if (devices == 0) return why;
  if (devices < min_devices) {
    return "needs " + std::to_string(min_devices) + " CUDA devices, " + std::to_string(devices) +
           " visible";
  }
  return std::nullopt;
}

// In a TEST body: skip it, saying why, unless `min_devices` CUDA devices are visible.
#define TP_SKIP_WITHOUT_CUDA_DEVICES(min_devices)            \
  do {                                                       \
    if (const std::optional<std::string> tp_skip_reason_ =   \
            ::tpserve::gpu_test::CudaSkipReason(min_devices); \
        tp_skip_reason_.has_value()) {                       \
      GTEST_SKIP() << *tp_skip_reason_;                      \
    }                                                        \
  } while (0)

// `host` in a new device buffer, and a buffer's contents back, through `stream` (gtest failures
// on error).
template <typename T>
cuda::DeviceBuffer<T> Upload(const std::vector<T>& host, cudaStream_t stream) {
  absl::StatusOr<cuda::DeviceBuffer<T>> buffer = cuda::DeviceBuffer<T>::Allocate(host.size());
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_TRUE(buffer->CopyFromHost(host, stream).ok());
  return *std::move(buffer);
}

template <typename T>
std::vector<T> Download(const cuda::DeviceBuffer<T>& buffer, cudaStream_t stream) {
  std::vector<T> host(buffer.size());
  const absl::Status status = buffer.CopyToHost(absl::MakeSpan(host), stream);
  EXPECT_TRUE(status.ok()) << status;
  return host;
}

// ||got - want||_2 / ||want||_2, in double; ||got||_2 when want is all zeros (so that 0 vs 0 is
// 0). Sizes must match. A NaN or infinity anywhere makes the result NaN or infinite, which fails
// every `<= tolerance` check.
inline double NormalizedError(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

}  // namespace tpserve::gpu_test
