// The few threads the front ends (HTTP, gRPC) hand work to that must not run on an I/O thread
// or the engine thread: parsing a body, rendering the chat template, tokenizing, waiting for an
// output constraint to compile, and turning the engine's news into wire messages. However many
// requests are open, these threads are all there are: a request costs a queued task, never a
// thread.
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tpserve {

class FrontEndPool {
 public:
  // `threads` workers; at most `max_queued` new requests (TryPost) wait for one.
  FrontEndPool(int threads, size_t max_queued);
  ~FrontEndPool();  // Stop()

  // Runs what is queued, then joins the threads; what is posted later is dropped. Idempotent.
  void Stop();

  // A new request's first task: false (nothing queued) when max_queued already wait, so the
  // caller refuses the request (503) instead of queueing without bound.
  bool TryPost(std::function<void()> task);
  // Work for a request already admitted (its news, its end): always queued, as refusing it would
  // lose what the engine produced. At most one such task per request waits at a time.
  void Post(std::function<void()> task);

  // Threads for a machine with `cores`: enough to keep the engine fed, few enough to stay small.
  static int DefaultThreads(unsigned cores);

 private:
  void Work();

  struct Task {
    std::function<void()> run;
    bool is_new;  // from TryPost
  };

  const size_t max_queued_;
  absl::Mutex mutex_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mutex_);
  size_t queued_new_ ABSL_GUARDED_BY(mutex_) = 0;  // TryPost tasks among tasks_
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tpserve
