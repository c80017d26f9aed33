#include "coordinator/heartbeat_monitor.h"

#include <algorithm>
#include <utility>

#include "common/thread_name.h"

namespace tpserve {

HeartbeatMonitor::HeartbeatMonitor(WorkerPool* pool, absl::Duration interval,
                                   std::function<void(const absl::Status&)> on_failure)
    : pool_(pool), interval_(interval), on_failure_(std::move(on_failure)) {
  thread_ = std::thread([this] {
    NameThisThread("tp-heartbeat");
    Run();
  });
}

HeartbeatMonitor::~HeartbeatMonitor() {
  stop_.Notify();
  thread_.join();
}

void HeartbeatMonitor::Run() {
  absl::Time next = absl::Now();
  do {
    absl::Status status = pool_->Heartbeat(TimeoutFor(interval_));
    if (!status.ok() && !stop_.HasBeenNotified()) on_failure_(status);
    // On schedule, not an interval after the round: a late round must not push the next one
    // back. A round that overran (a starved coordinator) is not made up for.
    next = std::max(next + interval_, absl::Now());
  } while (!stop_.WaitForNotificationWithTimeout(next - absl::Now()));
}

}  // namespace tpserve
