#include "coordinator/request_stream.h"

#include <utility>

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

void RequestStream::Push(int32_t token_id, std::string text, std::optional<TokenLogprob> logprob) {
  absl::MutexLock lock(&mutex_);
  TP_CHECK(!finished_);
  pending_.token_ids.push_back(token_id);
  pending_.text.append(text);
  if (logprob.has_value()) pending_.logprobs.push_back(*std::move(logprob));
}

void RequestStream::PushText(std::string text) {
  absl::MutexLock lock(&mutex_);
  TP_CHECK(!finished_);
  pending_.text.append(text);
}

void RequestStream::Finish(FinishReason reason, int32_t prompt_tokens, int32_t completion_tokens,
                           int32_t cached_prompt_tokens) {
  absl::MutexLock lock(&mutex_);
  TP_CHECK(!finished_);
  finished_ = true;
  pending_.done = true;
  pending_.finish_reason = reason;
  pending_.prompt_tokens = prompt_tokens;
  pending_.completion_tokens = completion_tokens;
  pending_.cached_prompt_tokens = cached_prompt_tokens;
}

void RequestStream::FinishScore(std::vector<float> logits, int32_t prompt_tokens) {
  absl::MutexLock lock(&mutex_);
  TP_CHECK(!finished_);
  finished_ = true;
  pending_.done = true;
  pending_.logits = std::move(logits);
  pending_.prompt_tokens = prompt_tokens;
}

void RequestStream::Fail(absl::Status status) {
  TP_CHECK(!status.ok());
  absl::MutexLock lock(&mutex_);
  TP_CHECK(!finished_);
  finished_ = true;
  pending_.done = true;
  pending_.status = std::move(status);
}

bool RequestStream::cancelled() const {
  absl::MutexLock lock(&mutex_);
  return cancelled_;
}

StreamUpdate RequestStream::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  auto news = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return pending_.done || !pending_.token_ids.empty() || !pending_.text.empty();
  };
  mutex_.AwaitWithTimeout(absl::Condition(&news), timeout);
  StreamUpdate update = std::move(pending_);
  pending_ = StreamUpdate{};
  return update;
}

void RequestStream::Cancel() {
  absl::MutexLock lock(&mutex_);
  cancelled_ = true;
}

}  // namespace tpserve
