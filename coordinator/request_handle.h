// The channel between the engine thread and the front end answering one request: the engine
// pushes each sample's tokens and outcome, the front end takes them when it is notified, and may
// cancel. One handle carries all n samples of a request, so their news wakes the front end once,
// whichever sample it belongs to, and nothing polls.
//
// Thread-safe: the engine thread produces; any thread may take, wait or cancel.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
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

// What the engine produced for one sample since the front end last took its news.
struct StreamUpdate {
  int32_t index = 0;               // which of the request's samples
  std::vector<int32_t> token_ids;  // new tokens to stream
  // New text: whole UTF-8 characters. Text that may be the start of a stop string is held back
  // until it is known not to be one, so it can trail token_ids.
  std::string text;
  std::vector<TokenLogprob> logprobs;  // one per token id, when the request asked for them
  bool done = false;                   // nothing follows this update
  absl::Status status;                 // when done: OK, or why the sample failed
  // When done and OK:
  std::optional<FinishReason> finish_reason;  // Generate only
  std::string stop_string;                    // the stop string that ended it, if one did
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;     // includes a final stop token that is not streamed
  int32_t cached_prompt_tokens = 0;  // prompt tokens taken from the prefix cache
  std::vector<float> logits;         // Score only: [prompt_tokens, vocab]
  // When the engine pushed the first of this news: how long delivery took is measured from it.
  absl::Time made = absl::InfinitePast();

  bool empty() const { return token_ids.empty() && text.empty() && logprobs.empty() && !done; }
};

class RequestHandle {
 public:
  RequestHandle(uint64_t request_id, int32_t num_samples);

  uint64_t request_id() const { return request_id_; }
  int32_t num_samples() const { return num_samples_; }

  // Engine side, per sample. After a sample's Finish*/Fail nothing more may be pushed for it.
  void Push(int32_t sample, int32_t token_id, std::string text,
            std::optional<TokenLogprob> logprob);
  void PushText(int32_t sample, std::string text);  // text released without a token (at the end)
  void Finish(int32_t sample, FinishReason reason, int32_t prompt_tokens, int32_t completion_tokens,
              int32_t cached_prompt_tokens, std::string stop_string = "");
  void FinishScore(int32_t sample, std::vector<float> logits, int32_t prompt_tokens);
  void Fail(int32_t sample, absl::Status status);
  // The request is held for a lost rank (engine.h's failure model), waiting for `what`: news
  // for the front end to pass on (an SSE keep-alive), though no token came.
  void Pause(std::string what);
  bool cancelled() const;

  // Front-end side. `notify` is called when news arrives that has not been taken, once until the
  // next Take(): on the engine thread, so it must only hand the work to the front end's own
  // thread (post it), never block or call back into the handle. Called at once when news waits.
  // An empty `notify` unsubscribes.
  void SetNotifier(std::function<void()> notify);
  // The news since the last Take(), one update per sample that has some, in sample order; none
  // is empty. A sample whose update is `done` is finished.
  std::vector<StreamUpdate> Take();
  // What the last Pause() since the previous call waits for; empty when none came.
  std::string TakePause();
  // Blocks until there is news, the handle is cancelled, or `deadline`; then Take().
  std::vector<StreamUpdate> Wait(absl::Time deadline);
  // Every sample's final update has been taken.
  bool finished() const;
  // The client went away: the engine drops every sample at its next step. Wakes Wait().
  void Cancel();

 private:
  // The pending update of `sample`, stamped when it starts to fill; marks news (engine side).
  StreamUpdate& News(int32_t sample) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The notifier to call once the lock is released, if this news is the first untaken.
  std::shared_ptr<std::function<void()>> TakeNotifier() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // News(sample), marked the sample's last.
  StreamUpdate& End(int32_t sample) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Runs `change` (which records news) under the lock, then the notifier without it, when this
  // is the first news not taken: every producer call goes through here.
  template <typename Change>
  void Publish(Change&& change) {
    std::shared_ptr<std::function<void()>> notify;
    {
      absl::MutexLock lock(&mutex_);
      change();
      notify = TakeNotifier();
    }
    if (notify != nullptr) (*notify)();
  }

  const uint64_t request_id_;
  const int32_t num_samples_;

  mutable absl::Mutex mutex_;
  std::vector<StreamUpdate> pending_ ABSL_GUARDED_BY(mutex_);
  std::vector<bool> ended_ ABSL_GUARDED_BY(mutex_);  // the engine finished or failed the sample
  int32_t taken_done_ ABSL_GUARDED_BY(mutex_) = 0;   // final updates taken
  std::string pause_ ABSL_GUARDED_BY(mutex_);
  bool has_news_ ABSL_GUARDED_BY(mutex_) = false;
  bool notified_ ABSL_GUARDED_BY(mutex_) = false;  // since the last Take()
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
  // Called without the lock, so a copy of the pointer is taken under it.
  std::shared_ptr<std::function<void()>> notify_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace tpserve
