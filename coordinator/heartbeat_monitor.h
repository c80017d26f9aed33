// Calls Status on every rank at a fixed interval and reports a rank that stops answering (or
// reports itself failed). See DESIGN.md "Failure model".
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
  // Starts the heartbeat thread; the first round runs at once. `on_failure` runs on it after every failed round, with
  // WorkerPool::Heartbeat's status; `pool` must outlive the monitor.
  HeartbeatMonitor(WorkerPool* pool, absl::Duration interval, absl::Duration timeout,
                   std::function<void(const absl::Status&)> on_failure);
  ~HeartbeatMonitor();  // stops and joins the thread

 private:
  void Run();

  WorkerPool* const pool_;
  const absl::Duration interval_;
  const absl::Duration timeout_;
  const std::function<void(const absl::Status&)> on_failure_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace tpserve
