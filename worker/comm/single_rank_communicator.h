// The communicator of a world of one: every collective is a copy or nothing.
#pragma once

#include "worker/comm/communicator.h"

namespace tpserve {

class SingleRankCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status AllReduceSum(float* data, int64_t count) override;
  absl::Status GatherToRoot(const float* send, absl::Span<const int64_t> counts,
                            float* recv) override;
  // Nothing to abandon: no collective here ever waits.
  void Abort(absl::string_view) override {}
};

}  // namespace tpserve
