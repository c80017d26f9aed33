// absl::Status → grpc::Status at the edge of a gRPC service (STYLE.md: statuses become
// grpc::Status only at the edge). The two enumerations share their numeric codes.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tpserve {

inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace tpserve
