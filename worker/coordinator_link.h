// A worker's registration with its coordinator, and noticing that the coordinator is gone.
//
// A coordinator restarted behind the same address (a Kubernetes pod behind its Service) waits
// for every rank to register again; the ranks keep their loaded shards, so how soon the cluster
// serves again is how soon they notice and retry. They notice the connection of their last
// registration closing (a killed process's kernel closes it at once), or, when nothing closes it
// (a lost host), `silence` without a call from a coordinator that heartbeats every second.
// Registering again with a coordinator that is still there is harmless: it answers OK to the
// same rank, address and pid.
//
// Retries back off exponentially from kFirstRetry to kMaxRetry with jitter, so that a rack of
// ranks does not call in lockstep, and a coordinator that starts while they wait hears from each
// within kMaxRetry. Each attempt dials anew (fresh name resolution: a restarted pod may have a
// new address) and gRPC's own reconnect backoff, up to two minutes by default, is kept short.
#pragma once

#include <memory>
#include <random>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "worker/worker_server.h"

namespace tpserve {

struct RegisterBackoff {
  absl::Duration first = absl::Milliseconds(250);
  absl::Duration max = absl::Seconds(2);
  // Each wait is drawn uniformly from [1 - jitter, 1] times its nominal length.
  double jitter = 0.5;

  // The nominal wait before retry `attempt` (0 is the first retry).
  absl::Duration Nominal(int attempt) const;
};

class CoordinatorLink {
 public:
  struct Options {
    std::string coordinator;  // HOST:PORT
    int rank = 0;
    absl::Duration register_timeout = absl::Seconds(30);
    absl::Duration silence = absl::Seconds(30);
    RegisterBackoff backoff;
  };
  // `server` must outlive the link.
  CoordinatorLink(Options options, WorkerServer* server);

  // Registers this rank, retrying while the coordinator is unreachable. Empty on success or when
  // a shutdown was requested meanwhile; else the line to print.
  std::string Register();
  // Blocks until a shutdown is requested (true) or the coordinator is lost (false, logged with
  // what gave it away).
  bool WaitForShutdownOrLoss();
  // Before this worker stops on a signal: asks the coordinator to drain the group for it
  // (ClusterService.Leave) and waits until no request needs this rank, or the coordinator cannot
  // be asked (it is gone, or this rank is not in its group). Logs the outcome.
  void Leave();

 private:
  const Options options_;
  WorkerServer* const server_;
  std::mt19937_64 random_;
  // The channel of the last successful registration, watched for its connection closing.
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace tpserve
