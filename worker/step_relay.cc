#include "worker/step_relay.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::Status StepRelay::Send(const v1::StepRequest& request) {
  std::string bytes;
  if (!request.SerializeToString(&bytes)) {
    return absl::InternalError(absl::StrCat("step ", request.step_id(), " cannot be serialized"));
  }
  return comm_->BroadcastBytes(&bytes, /*await_root=*/false);
}

absl::StatusOr<v1::StepRequest> StepRelay::Receive() {
  std::string bytes;
  if (absl::Status s = comm_->BroadcastBytes(&bytes, /*await_root=*/true); !s.ok()) return s;
  v1::StepRequest request;
  if (!request.ParseFromString(bytes)) {
    return absl::InternalError(
        absl::StrCat("rank 0 relayed ", bytes.size(), " bytes that are not a StepRequest"));
  }
  return request;
}

}  // namespace tpserve
