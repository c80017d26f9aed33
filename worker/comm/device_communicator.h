// The collectives the CUDA model needs, on device memory and in stream order. Implementations:
// NcclCommunicator (a group of GPUs), SingleRankDeviceCommunicator (a world of one). CUDA builds
// only (TPSERVE_CUDA); include it only from CUDA-enabled sources.
//
// Every operation is enqueued on the caller's `stream` (the model's compute stream, so a
// collective is ordered after the kernels that produce its input and before those that read its
// output) and returns at once, without waiting; each may be captured into a CUDA graph, which
// then refers to this communicator: it must outlive the graph. Errors found at enqueue are
// returned; errors of the transfer itself surface at the stream's next synchronization.
//
// Calls are issued only from the worker's execution thread, in the same order on every rank (as
// for Communicator).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/cuda/bf16.h"

namespace tpserve {

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Sums `data` ([count] bf16, device memory) element-wise across ranks, in place; every rank
  // ends with the sum.
  virtual absl::Status EnqueueAllReduceSum(cuda::bf16* data, int64_t count,
                                           cudaStream_t stream) = 0;

  // Rank r sends `counts[r]` floats from `send` (device memory); ranks with a count of 0 send
  // nothing. Rank 0 receives every rank's floats concatenated in rank order into `recv` (device
  // memory, sum(counts) floats); `recv` is unused on other ranks. On rank 0 `recv` may be `send`:
  // rank 0's part is then already in place.
  virtual absl::Status EnqueueGatherToRoot(const float* send, absl::Span<const int64_t> counts,
                                           float* recv, cudaStream_t stream) = 0;

  // Point to point, for pipeline stages: `count` bf16 (device memory) to or from rank `peer`,
  // which enqueues the matching Recv or Send. Transfers between two ranks arrive in the order
  // they were sent.
  virtual absl::Status EnqueueSend(const cuda::bf16* data, int64_t count, int peer,
                                   cudaStream_t stream) = 0;
  virtual absl::Status EnqueueRecv(cuda::bf16* data, int64_t count, int peer,
                                   cudaStream_t stream) = 0;
};

}  // namespace tpserve
