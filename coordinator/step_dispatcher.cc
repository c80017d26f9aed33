#include "coordinator/step_dispatcher.h"

#include <algorithm>
#include <utility>

#include "common/check.h"
#include "common/thread_name.h"

namespace tpserve {

StepDispatcher::StepDispatcher(WorkerPool* pool, int depth) : pool_(pool), depth_(depth) {
  TP_CHECK(depth_ >= 1);
  if (depth_ == 1) return;
  for (int i = 0; i < depth_; ++i) {
    threads_.emplace_back([this] {
      NameThisThread("tp-step");
      Loop();
    });
  }
}

StepDispatcher::~StepDispatcher() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

size_t StepDispatcher::in_flight() const {
  absl::MutexLock lock(&mutex_);
  return calls_.size();
}

void StepDispatcher::Send(v1::StepRequest request, absl::Duration timeout) {
  auto call = std::make_shared<Call>();
  call->request = std::move(request);
  call->timeout = timeout;
  absl::MutexLock lock(&mutex_);
  TP_CHECK(calls_.size() < static_cast<size_t>(depth_));
  calls_.push_back(std::move(call));
}

absl::StatusOr<v1::StepResponse> StepDispatcher::TakeOldest() {
  std::shared_ptr<Call> call;
  {
    absl::MutexLock lock(&mutex_);
    TP_CHECK(!calls_.empty());
    call = calls_.front();
    if (depth_ > 1) {
      mutex_.Await(absl::Condition(
          +[](Call* c) { return c->answer.has_value(); }, call.get()));
    }
    calls_.pop_front();
  }
  if (depth_ == 1) return pool_->Step(call->request, call->timeout);
  return *std::move(call->answer);
}

void StepDispatcher::Loop() {
  for (;;) {
    std::shared_ptr<Call> call;
    {
      absl::MutexLock lock(&mutex_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return stopping_ ||
               std::any_of(calls_.begin(), calls_.end(), [](const auto& c) { return !c->started; });
      };
      mutex_.Await(absl::Condition(&ready));
      if (stopping_) return;
      call = *std::find_if(calls_.begin(), calls_.end(), [](const auto& c) { return !c->started; });
      call->started = true;
    }
    absl::StatusOr<v1::StepResponse> answer = pool_->Step(call->request, call->timeout);
    absl::MutexLock lock(&mutex_);
    call->answer = std::move(answer);
  }
}

}  // namespace tpserve
