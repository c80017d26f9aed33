// The cluster token: the shared secret that every call between the coordinator and its workers
// carries (ClusterService, WorkerService, both directions), so that a process which merely
// reaches a port cannot register a rank, read the rendezvous store, or stop, re-initialise or
// drive a worker. It travels as gRPC metadata `authorization: Bearer <token>`.
//
// Each process reads it once at start-up (LoadClusterToken) from --cluster-token-file or the
// TPSERVE_CLUSTER_TOKEN environment variable. A process started with neither runs an open
// cluster, and says so in its log: the local launcher and the Helm chart always set one.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {

inline constexpr char kClusterTokenEnv[] = "TPSERVE_CLUSTER_TOKEN";

// `file` (if not empty; surrounding whitespace trimmed) else the environment variable. An empty
// or unreadable file is an error naming the file, never echoing its contents.
absl::Status LoadClusterToken(const std::string& file);

// Whether a token is in force (false: an open cluster).
bool HasClusterToken();

// A channel to a cluster peer (args as grpc::CreateCustomChannel takes them) whose every call
// carries this process's token, over the process's TLS (ProcessTls) when it has one.
std::shared_ptr<grpc::Channel> ClusterChannel(const std::string& address,
                                              const grpc::ChannelArguments& args = {});

// OK when the call carries this process's token, or none is in force; otherwise
// UNAUTHENTICATED, recorded (RecordAuthRefusal, surface "cluster") with the method and the peer.
grpc::Status CheckClusterToken(const grpc::ServerContextBase& context, const char* method);
// The same check of an `authorization` value alone, unrecorded (coordinator/header_gate.h).
bool ClusterTokenAccepts(const std::string& authorization);

// Constant-time equality of two secrets (the time depends on the lengths only).
bool SecretsEqual(const std::string& a, const std::string& b);

// The secret of an `authorization: Bearer <secret>` value; empty when it is not one.
std::string BearerSecret(const std::string& authorization);

// A call's `authorization` metadata; empty when it has none.
std::string AuthorizationOf(const grpc::ServerContextBase& context);

}  // namespace tpserve
