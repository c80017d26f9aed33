#include "coordinator/header_gate.h"

#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#include <string>
#include <utility>

#include "grpcpp/security/auth_metadata_processor.h"

namespace tpserve {
namespace {

constexpr char kRefused[] = "missing or invalid credentials (metadata authorization: Bearer)";

std::string_view View(const grpc_slice& slice) {
  return {reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)), GRPC_SLICE_LENGTH(slice)};
}

// The core's hook: it runs while the headers are processed, and a refusal ends the stream before
// its message is read.
void ProcessHeaders(void* state, grpc_auth_context*, const grpc_metadata* headers, size_t count,
                    grpc_process_auth_metadata_done_cb done, void* user_data) {
  const HeaderGate& gate = *static_cast<const HeaderGate*>(state);
  std::string_view path;
  std::string_view authorization;
  for (size_t i = 0; i < count; ++i) {
    const std::string_view key = View(headers[i].key);
    if (key == ":path") path = View(headers[i].value);
    if (key == "authorization") authorization = View(headers[i].value);
  }
  if (gate(path, authorization)) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
  } else {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, kRefused);
  }
}

// Plaintext credentials carrying the core hook: grpc::InsecureServerCredentials() aborts on
// SetAuthMetadataProcessor, so the port is added with core credentials of its own.
class GatedPlaintextCredentials final : public grpc::ServerCredentials {
 public:
  explicit GatedPlaintextCredentials(HeaderGate gate) : gate_(std::move(gate)) {}
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& address, grpc_server* server) override {
    grpc_server_credentials* credentials = grpc_insecure_server_credentials_create();
    grpc_server_credentials_set_auth_metadata_processor(
        credentials,
        {ProcessHeaders, [](void* state) { delete static_cast<HeaderGate*>(state); },
         new HeaderGate(gate_)});
    const int port = grpc_server_add_http2_port(server, address.c_str(), credentials);
    grpc_server_credentials_release(credentials);
    return port;
  }

  const HeaderGate gate_;
};

// The same check through the C++ hook, which TLS credentials support.
class GateProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit GateProcessor(HeaderGate gate) : gate_(std::move(gate)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& headers, grpc::AuthContext*, OutputMetadata*,
                       OutputMetadata*) override {
    auto value = [&](const char* key) {
      const auto it = headers.find(key);
      return it == headers.end() ? std::string_view()
                                 : std::string_view(it->second.data(), it->second.size());
    };
    if (gate_(value(":path"), value("authorization"))) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, kRefused);
  }

 private:
  const HeaderGate gate_;
};

}  // namespace

std::shared_ptr<grpc::ServerCredentials> GatedServerCredentials(
    std::shared_ptr<grpc::ServerCredentials> tls, HeaderGate gate) {
  if (tls == nullptr) return std::make_shared<GatedPlaintextCredentials>(std::move(gate));
  tls->SetAuthMetadataProcessor(std::make_shared<GateProcessor>(std::move(gate)));
  return tls;
}

}  // namespace tpserve
