// The worker's one execution thread (DESIGN.md "Threads"): gRPC threads hand it work and wait for
// the result, so steps, loads and collectives all run on this thread, one at a time, in arrival
// order.
#pragma once

#include <deque>
#include <functional>
#include <thread>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tpserve {

class ExecutionThread {
 public:
  ExecutionThread();
  // Finishes the queued work, then joins the thread.
  ~ExecutionThread();
  ExecutionThread(const ExecutionThread&) = delete;
  ExecutionThread& operator=(const ExecutionThread&) = delete;

  // Runs `fn` on the execution thread and returns when it has returned.
  void Run(std::function<void()> fn);
  // The same; while waiting, calls `waiting` on this thread every `period`, each time before
  // `fn` has returned: the work queued after `fn` has not started, so `waiting` may act on the
  // state `fn` runs with (abort its collective).
  void Run(std::function<void()> fn, absl::Duration period,
           absl::FunctionRef<void()> waiting);
  // Queues `fn` and returns at once: work that runs until something ends it (a rank following
  // rank 0's steps), which whoever queues work behind it must end first.
  void Post(std::function<void()> fn);

 private:
  struct Task {
    std::function<void()> fn;
    bool done = false;
    bool posted = false;  // nobody waits for it: Loop deletes it
  };

  void Loop();

  absl::Mutex mu_;
  std::deque<Task*> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Started last, in the constructor.
};

}  // namespace tpserve
