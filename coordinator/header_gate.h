// Credentials checked from a call's headers, before gRPC reads its message: a caller without the
// right key is refused (UNAUTHENTICATED) having cost the server no more than its headers, however
// large the message it sends (gRPC reads a unary request's whole message before any handler or
// interceptor runs). The handlers check the same keys again, as before.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "grpcpp/grpcpp.h"

namespace tpserve {

// Whether a call to `path` ("/package.Service/Method") carrying `authorization` (the header's
// value, empty when absent) may go on. Runs on a gRPC core thread: it must not block.
using HeaderGate = std::function<bool(std::string_view path, std::string_view authorization)>;

// `tls` (null: plaintext) with `gate` applied to every call's headers.
std::shared_ptr<grpc::ServerCredentials> GatedServerCredentials(
    std::shared_ptr<grpc::ServerCredentials> tls, HeaderGate gate);

}  // namespace tpserve
