// The DeviceCommunicator of a world of one: the all-reduce has nothing to add, the gather is a
// device copy, or nothing when in place; there is no peer to send to or receive from. CUDA builds
// only (TPSERVE_CUDA). It holds no state.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/cuda/bf16.h"
#include "worker/comm/device_communicator.h"

namespace tpserve {

class SingleRankDeviceCommunicator : public DeviceCommunicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status EnqueueAllReduceSum(cuda::bf16* data, int64_t count, cudaStream_t stream) override;
  absl::Status EnqueueGatherToRoot(const float* send, absl::Span<const int64_t> counts, float* recv,
                                   cudaStream_t stream) override;
  // INVALID_ARGUMENT: a world of one has no peer.
  absl::Status EnqueueSend(const cuda::bf16* data, int64_t count, int peer,
                           cudaStream_t stream) override;
  absl::Status EnqueueRecv(cuda::bf16* data, int64_t count, int peer, cudaStream_t stream) override;
};

}  // namespace tpserve
