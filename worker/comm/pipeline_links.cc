#include "worker/comm/pipeline_links.h"

#include <utility>

namespace tpserve {

void PipelineLinks::Reset(std::unique_ptr<Communicator> from_previous,
                          std::unique_ptr<Communicator> to_next,
                          DeviceCommunicator* device_from_previous,
                          DeviceCommunicator* device_to_next) {
  absl::MutexLock lock(&mu_);
  from_previous_.swap(from_previous);
  to_next_.swap(to_next);
  device_from_previous_ = device_from_previous;
  device_to_next_ = device_to_next;
}

absl::Status PipelineLinks::Receive(float* data, int64_t count) {
  if (from_previous_ == nullptr) {
    return absl::FailedPreconditionError("the first pipeline stage receives no hidden states");
  }
  const int64_t counts[2] = {0, count};
  // The receiver sends nothing; `data` stands in for its empty share.
  return from_previous_->GatherToRoot(data, counts, data);
}

absl::Status PipelineLinks::Send(const float* data, int64_t count) {
  if (to_next_ == nullptr) {
    return absl::FailedPreconditionError("the last pipeline stage sends no hidden states");
  }
  const int64_t counts[2] = {0, count};
  // Only the receiver writes what is gathered.
  return to_next_->GatherToRoot(data, counts, nullptr);
}

void PipelineLinks::Abort(absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  if (from_previous_ != nullptr) from_previous_->Abort(reason);
  if (to_next_ != nullptr) to_next_->Abort(reason);
}

}  // namespace tpserve
