// One generation request over HTTP (/v1/completions, /v1/chat/completions, /v1/messages,
// /v1/responses), from its body to its last byte, without a thread of its own:
//
//   I/O thread   Start: queued on the FrontEndPool, or 503 when it is full
//   pool         Prepare: parse the body (generation_apis.h), render the template, tokenize; a
//                prompt_logprobs
//                request first submits the prompt for scoring (OnScoreNews → pool → Submit),
//                then Submit (which waits for an output constraint to compile)
//   I/O thread   Begin: the stream's head and first events; then OnNews each time the engine's
//                notifier posts one: each sample's text split by its ReplyStream (thinking,
//                content, tool calls), written as the API's events by its ReplyWriter (or
//                collected into the whole answer) until every sample is done
//
// A client that goes away cancels the request (OnGone). While the engine holds the request for
// a lost rank, its pause notices become SSE comments ": paused, waiting for <what>".
//
// The generations of a server share HttpGenerations: it holds each until it ends, and Stop cuts
// them all.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/engine.h"
#include "coordinator/front_end_pool.h"
#include "coordinator/generation_apis.h"
#include "coordinator/http_exchange.h"
#include "coordinator/http_message.h"
#include "coordinator/http_server_options.h"
#include "coordinator/openai_response.h"
#include "coordinator/reply_stream.h"
#include "coordinator/reply_writer.h"

namespace tpserve {

class HttpGeneration;

// Every generation of one server, until it ends. Thread-safe.
class HttpGenerations {
 public:
  HttpGenerations(const HttpServerOptions& options, FrontEndPool& pool);

  // Generations that exist (ending ones included): Stop waits for none.
  bool WaitNone(absl::Time deadline);
  // The server stops: every generation is cut (an error event, or 503) and none starts.
  void CutAll();
  bool stopping() const { return stopping_.load(); }

  const HttpServerOptions& options() const { return options_; }
  FrontEndPool& pool() const { return pool_; }
  ResponseStore& responses() { return responses_; }
  // What requests are parsed against, `engine` serving; without one, the default limits.
  ServedModel Model(const Engine& engine) const;
  ServedModel Model() const;
  // The LoRA adapters requests may name now.
  std::vector<LoraModule> Loras() const;

 private:
  friend class HttpGeneration;
  void Add(const std::shared_ptr<HttpGeneration>& generation);
  void Remove(const HttpGeneration* generation);  // it ended; it may live on a moment
  void Destroyed();

  const HttpServerOptions& options_;
  FrontEndPool& pool_;
  const ToolCallFormat tool_format_;  // of options_.chat_template, found once
  ResponseStore responses_;           // the Responses API's stored conversations
  std::atomic<bool> stopping_{false};
  absl::Mutex mutex_;
  absl::flat_hash_map<const HttpGeneration*, std::shared_ptr<HttpGeneration>> open_
      ABSL_GUARDED_BY(mutex_);
  int alive_ ABSL_GUARDED_BY(mutex_) = 0;
};

class HttpGeneration : public std::enable_shared_from_this<HttpGeneration> {
 public:
  // I/O thread: takes the request on.
  static void Start(std::shared_ptr<HttpGenerations> shared, Engine* engine, GenerationApi api,
                    std::shared_ptr<HttpExchange> exchange, HttpRequest request);

  HttpGeneration(std::shared_ptr<HttpGenerations> shared, Engine* engine, GenerationApi api,
                 std::shared_ptr<HttpExchange> exchange, HttpRequest request);
  ~HttpGeneration();

  // Any thread: the server stops.
  void Cut();

 private:
  enum class Phase { kPreparing, kScoring, kGenerating, kEnded };

  // Pool.
  void Prepare();
  void Submit();
  // What the engine refused (or failed the prompt's scoring with) is the reply.
  void Refuse(absl::Status status);
  // I/O thread.
  void OnScoreNews();
  void Begin();
  void OnNews();
  void OnGone();
  // From now on a client that leaves ends the request (OnGone); set once handle_ is, each phase.
  void WatchClient();
  void OnCut();
  // One sample's news, split into its reply's parts.
  SampleNews Split(StreamUpdate& update);
  // Whole answer: adds the news to the sample's choice.
  void Collect(SampleNews& news);
  // Every sample is done: the usage chunk and [DONE], or the whole answer.
  void Complete();
  // A sample failed (or the server stops): an error event ends the stream, or the error is the
  // reply.
  void FailWith(const absl::Status& status);
  HttpReply Error(const absl::Status& status) const { return ApiErrorReply(api_, status); }
  void Write(std::string event, absl::Time made = absl::InfinitePast());
  // Any thread, once: the answer is the reply (or the stream is ended); the handle is cancelled
  // unless every sample finished.
  void EndWith(std::optional<HttpReply> reply);
  // Posts OnNews (or OnScoreNews) to the I/O thread whenever the engine has news.
  void Subscribe(void (HttpGeneration::*on_news)());

  const std::shared_ptr<HttpGenerations> shared_;
  Engine* const engine_;
  const GenerationApi api_;
  const std::shared_ptr<HttpExchange> exchange_;
  HttpRequest request_;  // its body is dropped once parsed

  std::atomic<Phase> phase_{Phase::kPreparing};
  std::optional<ParsedGeneration> parsed_;
  std::shared_ptr<RequestHandle> handle_;
  std::vector<TokenLogprob> prompt_logprobs_;
  std::vector<float> score_logits_;
  uint64_t request_id_ = 0;

  // I/O thread, once generating.
  std::unique_ptr<ReplyWriter> writer_;
  std::vector<ReplyStream> streams_;   // per sample
  std::vector<ChoiceOutput> choices_;  // the whole answer, when not streaming
  Usage usage_;
};

}  // namespace tpserve
