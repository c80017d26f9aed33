#include "coordinator/front_end_pool.h"

#include <algorithm>
#include <utility>

#include "common/thread_name.h"

namespace tpserve {

FrontEndPool::FrontEndPool(int threads, size_t max_queued) : max_queued_(max_queued) {
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      NameThisThread("tp-front-end");
      Work();
    });
  }
}

FrontEndPool::~FrontEndPool() { Stop(); }

void FrontEndPool::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  absl::MutexLock lock(&mutex_);
  tasks_.clear();
}

int FrontEndPool::DefaultThreads(unsigned cores) {
  return static_cast<int>(std::clamp<unsigned>(cores, 2, 8));
}

bool FrontEndPool::TryPost(std::function<void()> task) {
  absl::MutexLock lock(&mutex_);
  if (queued_new_ >= max_queued_ || stopping_) return false;
  ++queued_new_;
  tasks_.push_back({std::move(task), true});
  return true;
}

void FrontEndPool::Post(std::function<void()> task) {
  absl::MutexLock lock(&mutex_);
  tasks_.push_back({std::move(task), false});
}

void FrontEndPool::Work() {
  for (;;) {
    Task task;
    {
      absl::MutexLock lock(&mutex_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return stopping_ || !tasks_.empty();
      };
      mutex_.Await(absl::Condition(&ready));
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      if (task.is_new) --queued_new_;
    }
    task.run();
  }
}

}  // namespace tpserve
