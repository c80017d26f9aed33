// The channel between the engine thread and the front-end thread serving one request: the
// engine pushes tokens and the final outcome, the front end waits for them and may cancel.
//
// Thread-safe: one producer (the engine), one consumer (the front end).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tpserve {

enum class FinishReason { kStop, kLength };
const char* FinishReasonName(FinishReason reason);  // "stop", "length"

// A generated token's log-probability and the most likely tokens at its position.
struct TokenLogprob {
  int32_t token_id = 0;
  // NaN for a prompt's first token, which nothing precedes (written as null).
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (token id, logprob), most likely first
  int32_t rank = 0;  // prompt tokens only: 1 + the tokens more likely at that position
};

// What the engine produced since the previous Wait().
struct StreamUpdate {
  std::vector<int32_t> token_ids;  // new tokens to stream
  // New text: whole UTF-8 characters. Text that may be the start of a stop string is held back
  // until it is known not to be one, so it can trail token_ids.
  std::string text;
  std::vector<TokenLogprob> logprobs;  // one per token id, when the request asked for them
  bool done = false;               // nothing follows this update
  absl::Status status;             // when done: OK, or why the request failed
  // When done and OK:
  std::optional<FinishReason> finish_reason;  // Generate only
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // includes a final stop token that is not streamed
  int32_t cached_prompt_tokens = 0;  // prompt tokens taken from the prefix cache
  std::vector<float> logits;      // Score only: [prompt_tokens, vocab]
};

class RequestStream {
 public:
  // `index`: which of the request's n samples this stream carries.
  explicit RequestStream(uint64_t request_id, int32_t index = 0)
      : request_id_(request_id), index_(index) {}

  uint64_t request_id() const { return request_id_; }
  int32_t index() const { return index_; }

  // Engine side. After Finish*/Fail nothing more may be pushed.
  void Push(int32_t token_id, std::string text, std::optional<TokenLogprob> logprob);
  void PushText(std::string text);  // text released without a new token (at the end)
  void Finish(FinishReason reason, int32_t prompt_tokens, int32_t completion_tokens,
              int32_t cached_prompt_tokens);
  void FinishScore(std::vector<float> logits, int32_t prompt_tokens);
  void Fail(absl::Status status);
  bool cancelled() const;

  // Front-end side. Waits up to `timeout` for news and takes it; the update is empty (no tokens,
  // not done) on timeout.
  StreamUpdate Wait(absl::Duration timeout);
  // The client went away: the engine drops the request at its next step.
  void Cancel();

 private:
  const uint64_t request_id_;
  const int32_t index_;

  mutable absl::Mutex mutex_;
  StreamUpdate pending_ ABSL_GUARDED_BY(mutex_);
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;  // Finish*/Fail was called
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace tpserve
