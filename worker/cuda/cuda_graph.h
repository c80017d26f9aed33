// CudaGraphExec: owns an instantiated CUDA graph, made by capturing what a function enqueues on a
// stream. Move-only; the destructor destroys the executable graph.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cuda_check.h"

namespace tpserve::cuda {

class CudaGraphExec {
 public:
  // Captures what `enqueue` puts on `stream` (thread-local capture mode: other threads' CUDA
  // calls are not affected), instantiates it and uploads it to the device on `stream`, so that
  // the first launch does not pay for the upload (a first decode step would otherwise be slower
  // than the rest). The capture is always ended, also when `enqueue` fails, so the stream stays
  // usable; `enqueue`'s error is returned first.
  static absl::StatusOr<CudaGraphExec> Capture(cudaStream_t stream,
                                               const std::function<absl::Status()>& enqueue) {
    absl::Status status = CudaStatus(
        cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    if (!status.ok()) return status;
    status = enqueue();
    cudaGraph_t graph = nullptr;
    const absl::Status end = CudaStatus(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    if (status.ok()) status = end;
    cudaGraphExec_t exec = nullptr;
    if (status.ok()) {
      status = CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    }
    if (status.ok()) status = CudaStatus(cudaGraphUpload(exec, stream), "cudaGraphUpload");
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!status.ok()) {
      if (exec != nullptr) cudaGraphExecDestroy(exec);
      cudaGetLastError();  // Leave no sticky launch error for the next unrelated check.
      return status;
    }
    return CudaGraphExec(exec);
  }

  CudaGraphExec(CudaGraphExec&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  CudaGraphExec& operator=(CudaGraphExec&& other) noexcept {
    if (this != &other) {
      Destroy();
      exec_ = std::exchange(other.exec_, nullptr);
    }
    return *this;
  }
  CudaGraphExec(const CudaGraphExec&) = delete;
  CudaGraphExec& operator=(const CudaGraphExec&) = delete;
  ~CudaGraphExec() { Destroy(); }

  absl::Status Launch(cudaStream_t stream) const {
    return CudaStatus(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
  }

 private:
  explicit CudaGraphExec(cudaGraphExec_t exec) : exec_(exec) {}
  void Destroy() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }

  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace tpserve::cuda
