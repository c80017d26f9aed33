// The collectives a tensor-parallel rank needs. Implementations: SingleRankCommunicator (T=1),
// GlooCommunicator (CPU, TCP), NcclCommunicator (CUDA). Calls are issued only from the worker's
// execution thread, in the same order on every rank. The CUDA model's stream-ordered collectives
// on device memory are a DeviceCommunicator (device_communicator.h), handed to it explicitly.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tpserve {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Sums `count` floats element-wise across ranks, in place; every rank ends with the sum.
  virtual absl::Status AllReduceSum(float* data, int64_t count) = 0;

  // Rank r sends `counts[r]` floats from `send`. Rank 0 receives every rank's floats concatenated
  // in rank order into `recv` (sum(counts) floats); `recv` is unused on other ranks.
  virtual absl::Status GatherToRoot(const float* send, absl::Span<const int64_t> counts,
                                    float* recv) = 0;

  // Abandons the group: the collective this rank waits in returns UNAVAILABLE naming `reason`
  // promptly, and so does every later one (the communicator stays broken; form a new group).
  // The one method any thread may call, at any time: the coordinator gave up the step, so its
  // peers will not come. Rank-local; the peers find out as they would from a failed rank.
  virtual void Abort(absl::string_view reason) = 0;
};

}  // namespace tpserve
