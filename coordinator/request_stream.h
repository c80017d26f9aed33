// The channel between the engine thread and the front-end thread serving one request: the
// engine pushes tokens and the final outcome, the front end waits for them and may cancel.
//
// Thread-safe: one producer (the engine), one consumer (the front end).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tpserve {

enum class FinishReason { kStop, kLength };
const char* FinishReasonName(FinishReason reason);  // "stop", "length"

// What the engine produced since the previous Wait().
struct StreamUpdate {
  std::vector<int32_t> token_ids;  // new tokens to stream
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
  explicit RequestStream(uint64_t request_id) : request_id_(request_id) {}

  uint64_t request_id() const { return request_id_; }

  // Engine side. After Finish*/Fail nothing more may be pushed.
  void Push(int32_t token_id);
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

  mutable absl::Mutex mutex_;
  StreamUpdate pending_ ABSL_GUARDED_BY(mutex_);
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;  // Finish*/Fail was called
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace tpserve
