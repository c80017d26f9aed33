#include "coordinator/heartbeat_monitor.h"

#include <utility>

namespace tpserve {

HeartbeatMonitor::HeartbeatMonitor(WorkerPool* pool, absl::Duration interval,
                                   absl::Duration timeout,
                                   std::function<void(const absl::Status&)> on_failure)
    : pool_(pool), interval_(interval), timeout_(timeout), on_failure_(std::move(on_failure)) {
  thread_ = std::thread([this] { Run(); });
}

HeartbeatMonitor::~HeartbeatMonitor() {
  stop_.Notify();
  thread_.join();
}

void HeartbeatMonitor::Run() {
  do {
    absl::Status status = pool_->Heartbeat(timeout_);
    if (!status.ok() && !stop_.HasBeenNotified()) on_failure_(status);
  } while (!stop_.WaitForNotificationWithTimeout(interval_));
}

}  // namespace tpserve
