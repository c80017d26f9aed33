#include "worker/coordinator_link.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/cluster_token.h"
#include "common/logging.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "worker";
// How often the wait looks at the connection; a lost coordinator is noticed within this.
constexpr absl::Duration kWatchInterval = absl::Milliseconds(100);
constexpr absl::Duration kAttemptTimeout = absl::Seconds(2);
// The coordinator answers Leave within its --shutdown-timeout; an orchestrator's grace period
// bounds this wait in practice.
constexpr absl::Duration kLeaveTimeout = absl::Minutes(10);

std::shared_ptr<grpc::Channel> Dial(const std::string& address) {
  grpc::ChannelArguments args;
  // Not the process-wide subchannel pool: a subchannel there keeps its reconnect backoff from
  // earlier channels to the same address.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return ClusterChannel(address, args);
}

}  // namespace

absl::Duration RegisterBackoff::Nominal(int attempt) const {
  absl::Duration wait = first;
  for (int i = 0; i < attempt && wait < max; ++i) wait *= 2;
  return std::min(wait, max);
}

CoordinatorLink::CoordinatorLink(Options options, WorkerServer* server)
    : options_(std::move(options)),
      server_(server),
      random_(std::random_device{}() ^ static_cast<uint64_t>(getpid())) {}

std::string CoordinatorLink::Register() {
  v1::RegisterRequest request;
  request.set_rank(options_.rank);
  request.set_address(server_->address());
  request.set_hostname(server_->hostname());
  request.set_pid(static_cast<int32_t>(getpid()));
  const absl::Time deadline = absl::Now() + options_.register_timeout;
  std::uniform_real_distribution<double> jitter(1.0 - options_.backoff.jitter, 1.0);
  for (int attempt = 0; !server_->shutdown_requested(); ++attempt) {
    std::shared_ptr<grpc::Channel> channel = Dial(options_.coordinator);
    auto stub = v1::ClusterService::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kAttemptTimeout));
    v1::RegisterResponse response;
    const grpc::Status status = stub->Register(&context, request, &response);
    if (status.ok()) {
      channel_ = std::move(channel);
      return "";
    }
    const bool unreachable = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!unreachable) {
      return absl::StrCat("tpserve-worker: the coordinator at ", options_.coordinator,
                          " refused rank ", options_.rank, ": ", status.error_message());
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::StrCat("tpserve-worker: cannot reach the coordinator at ", options_.coordinator,
                          " within --register-timeout ",
                          absl::ToInt64Seconds(options_.register_timeout), " s");
    }
    const absl::Duration wait = std::min(
        options_.backoff.Nominal(attempt) * jitter(random_), deadline - now);
    server_->WaitForShutdownRequest(wait);
  }
  return "";
}

bool CoordinatorLink::WaitForShutdownOrLoss() {
  while (true) {
    switch (server_->WaitForShutdownOrSilence(options_.silence, kWatchInterval)) {
      case WorkerServer::Wake::kShutdown:
        return true;
      case WorkerServer::Wake::kSilence:
        LogWarning(kLog,
                   "rank %d: no call from the coordinator at %s for %d s (--coordinator-timeout): "
                   "registering again, keeping the loaded shard",
                   options_.rank, options_.coordinator, absl::ToInt64Seconds(options_.silence));
        return false;
      case WorkerServer::Wake::kTimeout:
        break;
    }
    if (channel_ != nullptr && channel_->GetState(false) != GRPC_CHANNEL_READY) {
      LogWarning(kLog,
                 "rank %d: the connection to the coordinator at %s closed: registering again, "
                 "keeping the loaded shard",
                 options_.rank, options_.coordinator);
      return false;
    }
  }
}

void CoordinatorLink::Leave() {
  auto stub = v1::ClusterService::NewStub(Dial(options_.coordinator));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kLeaveTimeout));
  v1::LeaveRequest request;
  request.set_rank(options_.rank);
  request.set_address(server_->address());
  request.set_pid(static_cast<int32_t>(getpid()));
  v1::LeaveResponse response;
  LogInfo(kLog, "rank %d: asking the coordinator at %s to drain the group before this rank stops",
          options_.rank, options_.coordinator);
  const grpc::Status status = stub->Leave(&context, request, &response);
  if (!status.ok()) {
    LogWarning(kLog, "rank %d: stopping without a drain: the coordinator did not drain (%s)",
               options_.rank, status.error_message());
  } else if (response.drained()) {
    LogInfo(kLog, "rank %d: drained: every request in flight finished", options_.rank);
  } else {
    LogWarning(kLog, "rank %d: drained: the requests that could not finish in time ended with an "
               "error", options_.rank);
  }
}

}  // namespace tpserve
