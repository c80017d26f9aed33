// The standard gRPC health service (grpc.health.v1.Health, gRPC's own implementation, enabled by
// EnableGrpcHealthService before the servers are built) kept in step with readiness, for
// grpc_health_probe and Kubernetes' grpc probes: SERVING while the engine serves and is not
// draining; NOT_SERVING while the cluster starts, is degraded, drains or stops. One thread for the
// process, looking every `period`.
#pragma once

#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/engine.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {

// Turns gRPC's health service on for the servers built from now on, each NOT_SERVING until a
// HealthPublisher says otherwise.
void EnableGrpcHealthService();
void SetGrpcServing(grpc::Server* server, bool serving);

class HealthPublisher {
 public:
  HealthPublisher(grpc::Server* server, const Engine* engine, absl::Duration period);
  ~HealthPublisher();  // NOT_SERVING from then on
  HealthPublisher(const HealthPublisher&) = delete;
  HealthPublisher& operator=(const HealthPublisher&) = delete;

 private:
  grpc::Server* const server_;
  absl::Notification done_;
  std::thread thread_;
};

}  // namespace tpserve
