// Sends the engine's steps to the workers, up to `depth` at once, and hands their answers back in
// the order sent: with pipeline stages, step k+1 runs in the first stage while step k runs in a
// later one (DESIGN.md "Pipeline parallelism"). Each step in flight has a thread of its own, which
// waits on WorkerPool::Step; at depth 1 there is none: the engine's own thread makes the call when
// it takes the answer, as it always did.
//
// The calls of consecutive steps may reach a worker out of order; the worker runs them in step-id
// order (WorkerServer::Step).
//
// Not thread-safe: one thread (the engine's) sends and takes.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/worker_pool.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

class StepDispatcher {
 public:
  // `pool` must outlive the dispatcher; `depth` >= 1.
  StepDispatcher(WorkerPool* pool, int depth);
  // Waits for the steps in flight (their answers are dropped).
  ~StepDispatcher();
  StepDispatcher(const StepDispatcher&) = delete;
  StepDispatcher& operator=(const StepDispatcher&) = delete;

  int depth() const { return depth_; }
  // Steps sent whose answer was not taken yet.
  size_t in_flight() const;
  bool full() const { return in_flight() >= static_cast<size_t>(depth_); }

  // Sends `request`, which must wait at most `timeout` for its answer. Requires !full().
  void Send(v1::StepRequest request, absl::Duration timeout);
  // The answer to the oldest step not taken yet (WorkerPool::Step's), waiting for it. Requires
  // in_flight() > 0.
  absl::StatusOr<v1::StepResponse> TakeOldest();

 private:
  struct Call {
    v1::StepRequest request;
    absl::Duration timeout;
    bool started = false;  // a thread took it
    std::optional<absl::StatusOr<v1::StepResponse>> answer;
  };

  // A call thread: runs the calls in the order sent until the dispatcher goes.
  void Loop();

  WorkerPool* const pool_;
  const int depth_;
  mutable absl::Mutex mutex_;
  std::deque<std::shared_ptr<Call>> calls_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;  // [depth] when depth > 1; started last
};

}  // namespace tpserve
