#include "worker/execution_thread.h"

namespace tpserve {

ExecutionThread::ExecutionThread() : thread_([this] { Loop(); }) {}

ExecutionThread::~ExecutionThread() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void ExecutionThread::Run(std::function<void()> fn) {
  Task task{std::move(fn)};
  absl::MutexLock lock(&mu_);
  queue_.push_back(&task);
  mu_.Await(absl::Condition(
      +[](Task* t) { return t->done; }, &task));
}

void ExecutionThread::Run(std::function<void()> fn, absl::Duration period,
                          absl::FunctionRef<void()> waiting) {
  Task task{std::move(fn)};
  absl::MutexLock lock(&mu_);
  queue_.push_back(&task);
  // Called with mu_ held: Loop marks the task done, and takes the next, only under it.
  while (!mu_.AwaitWithTimeout(absl::Condition(
                                   +[](Task* t) { return t->done; }, &task),
                               period)) {
    waiting();
  }
}

void ExecutionThread::Post(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(new Task{std::move(fn), false, true});
}

void ExecutionThread::Loop() {
  while (true) {
    Task* task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ExecutionThread* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping_ and drained
      task = queue_.front();
      queue_.pop_front();
    }
    task->fn();
    if (task->posted) {
      delete task;
      continue;
    }
    absl::MutexLock lock(&mu_);
    task->done = true;
  }
}

}  // namespace tpserve
