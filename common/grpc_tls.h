// Mutual TLS on every gRPC hop (--tls-cert, --tls-key, --tls-ca): servers present their
// certificate and accept only callers whose certificate the CA signed; clients present theirs and
// accept only servers the CA signed. Without the three files everything stays plaintext, as
// before, and the cluster token and keys are the only credentials.
//
// Host names. A client checks the server's certificate against the host it dialed, so a local
// cluster (127.0.0.1) needs a certificate with the SAN IP:127.0.0.1. Where the dialed names are
// not known in advance (the chart: workers advertise their pod IPs), --tls-server-name N makes
// every client of the process check for the SAN N instead (gRPC's SSL target-name override):
// one cluster certificate with that name then serves every member.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {

// Paths as the flags give them; all of cert, key and ca, or none.
struct TlsFiles {
  std::string cert;         // --tls-cert: PEM certificate (chain) this process presents
  std::string key;          // --tls-key: PEM private key of that certificate
  std::string ca;           // --tls-ca: PEM certificates of the CA(s) peers must be signed by
  std::string server_name;  // --tls-server-name: SAN clients expect; empty: the dialed host

  bool empty() const { return cert.empty() && key.empty() && ca.empty(); }
};

class GrpcTls {
 public:
  // Plaintext.
  GrpcTls() = default;

  // Reads and checks the files: each must parse as PEM of its kind and the key must belong to
  // the certificate. Errors name the flag and the file, never what the file holds.
  static absl::StatusOr<GrpcTls> Load(const TlsFiles& files);

  bool enabled() const { return !cert_pem_.empty(); }

  // SSL that requires and verifies a client certificate, or insecure when not enabled.
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;
  // SSL presenting this process's certificate, or insecure when not enabled.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;
  // Adds the target-name override to `args` when there is one.
  void ApplyTo(grpc::ChannelArguments* args) const;
  // A channel to `address` with these credentials.
  std::shared_ptr<grpc::Channel> Channel(const std::string& address,
                                         grpc::ChannelArguments args = {}) const;

 private:
  std::string cert_pem_;
  std::string key_pem_;
  std::string ca_pem_;
  std::string server_name_;
};

// The process's own credentials, for the binaries: set once at start-up, before any channel or
// server exists (plaintext until then).
absl::Status LoadProcessTls(const TlsFiles& files);
const GrpcTls& ProcessTls();

}  // namespace tpserve
