// Calls Status on every rank once per interval and reports a rank that misses a heartbeat (does
// not answer within half an interval) or reports itself failed. See DESIGN.md "Failure model"
// and "Liveness is not speed".
//
// Rounds start on a fixed schedule, every `interval` from the first, and each must be answered
// within interval / 2, so a rank that goes silent at any moment is reported at most 1.5
// intervals later: the round under way when it stopped may still have been answered, the next
// one starts within an interval and misses after half of one. Workers answer Status on a gRPC
// thread from a snapshot, never behind a step, so a slow step does not miss a heartbeat.
#pragma once

#include <functional>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/worker_pool.h"

namespace tpserve {

class HeartbeatMonitor {
 public:
  // Starts the heartbeat thread; the first round runs at once. `on_failure` runs on it after
  // every failed round, with WorkerPool::Heartbeat's status; `pool` must outlive the monitor.
  HeartbeatMonitor(WorkerPool* pool, absl::Duration interval,
                   std::function<void(const absl::Status&)> on_failure);
  ~HeartbeatMonitor();  // stops and joins the thread

  // How long a rank has to answer one heartbeat.
  static absl::Duration TimeoutFor(absl::Duration interval) { return interval / 2; }

 private:
  void Run();

  WorkerPool* const pool_;
  const absl::Duration interval_;
  const std::function<void(const absl::Status&)> on_failure_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace tpserve
