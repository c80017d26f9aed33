#include "coordinator/request_handle.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/check.h"

namespace tpserve {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
  }
  return "unknown";
}

RequestHandle::RequestHandle(uint64_t request_id, int32_t num_samples)
    : request_id_(request_id),
      num_samples_(num_samples),
      pending_(num_samples),
      ended_(num_samples, false) {
  TP_CHECK(num_samples > 0);
  for (int32_t i = 0; i < num_samples; ++i) pending_[i].index = i;
}

StreamUpdate& RequestHandle::News(int32_t sample) {
  TP_CHECK(sample >= 0 && sample < num_samples());
  TP_CHECK(!ended_[sample]);
  StreamUpdate& update = pending_[sample];
  if (update.empty()) update.made = absl::Now();
  has_news_ = true;
  return update;
}

std::shared_ptr<std::function<void()>> RequestHandle::TakeNotifier() {
  if (notified_ || notify_ == nullptr) return nullptr;
  notified_ = true;
  return notify_;
}

StreamUpdate& RequestHandle::End(int32_t sample) {
  StreamUpdate& update = News(sample);
  ended_[sample] = true;
  update.done = true;
  return update;
}

void RequestHandle::Push(int32_t sample, int32_t token_id, std::string text,
                         std::optional<TokenLogprob> logprob) {
  Publish([&] {
    StreamUpdate& update = News(sample);
    update.token_ids.push_back(token_id);
    update.text.append(text);
    if (logprob.has_value()) update.logprobs.push_back(*std::move(logprob));
  });
}

void RequestHandle::PushText(int32_t sample, std::string text) {
  Publish([&] { News(sample).text.append(text); });
}

void RequestHandle::Finish(int32_t sample, FinishReason reason, int32_t prompt_tokens,
                           int32_t completion_tokens, int32_t cached_prompt_tokens,
                           std::string stop_string) {
  Publish([&] {
    StreamUpdate& update = End(sample);
    update.finish_reason = reason;
    update.stop_string = std::move(stop_string);
    update.prompt_tokens = prompt_tokens;
    update.completion_tokens = completion_tokens;
    update.cached_prompt_tokens = cached_prompt_tokens;
  });
}

void RequestHandle::FinishScore(int32_t sample, std::vector<float> logits, int32_t prompt_tokens) {
  Publish([&] {
    StreamUpdate& update = End(sample);
    update.logits = std::move(logits);
    update.prompt_tokens = prompt_tokens;
  });
}

void RequestHandle::Fail(int32_t sample, absl::Status status) {
  TP_CHECK(!status.ok());
  Publish([&] { End(sample).status = std::move(status); });
}

void RequestHandle::Pause(std::string what) {
  Publish([&] { pause_ = std::move(what); });
}

std::string RequestHandle::TakePause() {
  absl::MutexLock lock(&mutex_);
  return std::exchange(pause_, "");
}

bool RequestHandle::cancelled() const {
  absl::MutexLock lock(&mutex_);
  return cancelled_;
}

void RequestHandle::SetNotifier(std::function<void()> notify) {
  std::shared_ptr<std::function<void()>> now;
  {
    absl::MutexLock lock(&mutex_);
    notify_ = notify ? std::make_shared<std::function<void()>>(std::move(notify)) : nullptr;
    notified_ = false;
    if (has_news_) now = TakeNotifier();
  }
  if (now != nullptr) (*now)();
}

std::vector<StreamUpdate> RequestHandle::Take() {
  absl::MutexLock lock(&mutex_);
  std::vector<StreamUpdate> news;
  notified_ = false;
  if (!has_news_) return news;
  has_news_ = false;
  for (StreamUpdate& update : pending_) {
    if (update.empty()) continue;
    if (update.done) ++taken_done_;
    const int32_t index = update.index;
    news.push_back(std::move(update));
    update = StreamUpdate{};
    update.index = index;
  }
  return news;
}

std::vector<StreamUpdate> RequestHandle::Wait(absl::Time deadline) {
  {
    absl::MutexLock lock(&mutex_);
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return has_news_ || cancelled_; };
    mutex_.AwaitWithDeadline(absl::Condition(&woken), deadline);
  }
  return Take();
}

bool RequestHandle::finished() const {
  absl::MutexLock lock(&mutex_);
  return taken_done_ == num_samples();
}

void RequestHandle::Cancel() {
  absl::MutexLock lock(&mutex_);
  cancelled_ = true;
}

}  // namespace tpserve
