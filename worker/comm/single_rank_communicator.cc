#include "worker/comm/single_rank_communicator.h"

#include <algorithm>

namespace tpserve {

absl::Status SingleRankCommunicator::AllReduceSum(float* data, int64_t count) {
  return absl::OkStatus();
}

absl::Status SingleRankCommunicator::GatherToRoot(const float* send,
                                                  absl::Span<const int64_t> counts, float* recv) {
  if (counts.size() != 1) {
    return absl::InvalidArgumentError("GatherToRoot: a single rank expects exactly one count");
  }
  std::copy(send, send + counts[0], recv);
  return absl::OkStatus();
}

}  // namespace tpserve
