#include "coordinator/health_publisher.h"

#include <optional>

#include "common/logging.h"
#include "grpcpp/health_check_service_interface.h"

namespace tpserve {

void EnableGrpcHealthService() { grpc::EnableDefaultHealthCheckService(true); }

void SetGrpcServing(grpc::Server* server, bool serving) {
  if (grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
      health != nullptr) {
    health->SetServingStatus(serving);
  }
}

HealthPublisher::HealthPublisher(grpc::Server* server, const Engine* engine, absl::Duration period)
    : server_(server), thread_([this, engine, period] {
        std::optional<bool> published;
        do {
          const bool serving = engine->health().ok() && !engine->draining();
          if (published != serving) {
            SetGrpcServing(server_, serving);
            LogInfo("health", "grpc.health.v1: %s", serving ? "SERVING" : "NOT_SERVING");
            published = serving;
          }
        } while (!done_.WaitForNotificationWithTimeout(period));
      }) {}

HealthPublisher::~HealthPublisher() {
  done_.Notify();
  thread_.join();
  SetGrpcServing(server_, false);
}

}  // namespace tpserve
