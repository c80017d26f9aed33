#include "worker/comm/single_rank_device_communicator.h"

#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"

namespace tpserve {

absl::Status SingleRankDeviceCommunicator::EnqueueAllReduceSum(cuda::bf16*, int64_t count,
                                                               cudaStream_t) {
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AllReduceSum of ", count, " elements"));
  }
  return absl::OkStatus();
}

absl::Status SingleRankDeviceCommunicator::EnqueueGatherToRoot(const float* send,
                                                               absl::Span<const int64_t> counts,
                                                               float* recv, cudaStream_t stream) {
  if (counts.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("GatherToRoot got ", counts.size(), " counts for a world of 1"));
  }
  if (counts[0] < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GatherToRoot count ", counts[0], " is negative"));
  }
  if (counts[0] == 0 || recv == send) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(recv, send, static_cast<size_t>(counts[0]) * sizeof(float),
                                    cudaMemcpyDeviceToDevice, stream),
                    "GatherToRoot");
}

absl::Status SingleRankDeviceCommunicator::EnqueueSend(const cuda::bf16*, int64_t, int peer,
                                                       cudaStream_t) {
  return absl::InvalidArgumentError(absl::StrCat("Send to rank ", peer, " in a world of 1"));
}

absl::Status SingleRankDeviceCommunicator::EnqueueRecv(cuda::bf16*, int64_t, int peer,
                                                       cudaStream_t) {
  return absl::InvalidArgumentError(absl::StrCat("Recv from rank ", peer, " in a world of 1"));
}

}  // namespace tpserve
