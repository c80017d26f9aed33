#include "coordinator/http_server.h"

#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/auth_refusal.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/openai_error.h"
#include "coordinator/openai_response.h"
#include "coordinator/prompt_logprobs.h"
#include "coordinator/sample_streams.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::json;
using Streams = std::vector<std::shared_ptr<RequestStream>>;

constexpr char kLog[] = "http";
// How long a request thread waits on the engine before it looks at the client and at Stop().
constexpr absl::Duration kPoll = absl::Milliseconds(50);
constexpr char kJson[] = "application/json";
constexpr char kRequestIdHeader[] = "X-Request-Id";
// While requests are held for a lost rank, a stream that has had nothing to send for this long
// gets an SSE comment: the client (and any proxy's idle timeout) sees that it lives, and why it
// waits.
constexpr absl::Duration kKeepAliveEvery = absl::Seconds(1);

// ": paused, waiting for ...", one line whatever the cause's text holds.
std::string KeepAliveComment(const Engine::Pause& pause) {
  std::string comment = absl::StrCat(": paused, waiting for ", pause.waiting_for);
  for (char& c : comment) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return comment + "\n\n";
}

HttpReply ErrorReply(const absl::Status& status, int http_status) {
  HttpReply reply{http_status, kJson, {}, ErrorBody(status)};
  if (http_status == 429 || http_status == 503) reply.headers.emplace_back("Retry-After", "1");
  return reply;
}

HttpReply ErrorReply(const absl::Status& status) {
  return ErrorReply(status, HttpStatusOf(status));
}

HttpReply JsonReply(int status, const json& body) { return {status, kJson, {}, Dump(body)}; }

// Prompt tokens count once however many samples there are; completion tokens add up.
void AddUsage(const StreamUpdate& last, int32_t index, Usage* usage) {
  if (index == 0) {
    usage->prompt_tokens = last.prompt_tokens;
    usage->cached_prompt_tokens = last.cached_prompt_tokens;
  }
  usage->completion_tokens += last.completion_tokens;
}

struct Completed {
  std::vector<ChoiceOutput> choices;
  Usage usage;
};

// Waits for every sample. The first failure cancels the others and is returned. With
// `tool_syntax`, each reply's tool calls are taken out of its text.
absl::StatusOr<Completed> WaitAll(SampleStreams& samples, const std::atomic<bool>& stopping,
                                  const HttpExchange& exchange,
                                  std::optional<ToolCallSyntax> tool_syntax) {
  Completed result;
  result.choices.resize(samples.size());
  while (!samples.done()) {
    if (stopping.load()) {
      samples.CancelAll();
      return absl::UnavailableError("the HTTP server is stopping");
    }
    if (exchange.client_gone()) {
      samples.CancelAll();
      return absl::CancelledError("the client went away");
    }
    std::optional<SampleStreams::News> news = samples.Next(kPoll);
    if (!news.has_value()) continue;
    StreamUpdate& update = news->update;
    ChoiceOutput& choice = result.choices[news->index];
    choice.text += update.text;
    for (TokenLogprob& t : update.logprobs) choice.logprobs.push_back(std::move(t));
    if (!update.done) continue;
    if (!update.status.ok()) {
      samples.CancelAll();
      return update.status;
    }
    choice.finish_reason = update.finish_reason.value_or(FinishReason::kStop);
    if (tool_syntax.has_value()) {
      ToolCallDelta parsed = ParseToolCalls(*tool_syntax, choice.text);
      choice.text = std::move(parsed.content);
      choice.tool_calls = std::move(parsed.calls);
    }
    AddUsage(update, news->index, &result.usage);
  }
  return result;
}

// The log-probabilities of `prompt`'s tokens with `top_k` alternatives (PromptLogprobs), from a
// Score request that this waits for.
absl::StatusOr<std::vector<TokenLogprob>> ScorePrompt(Engine& engine,
                                                      const std::vector<int32_t>& prompt,
                                                      int32_t top_k,
                                                      const std::atomic<bool>& stopping,
                                                      const HttpExchange& exchange) {
  ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, engine.SubmitScore(prompt));
  for (;;) {
    if (stopping.load()) {
      stream->Cancel();
      return absl::UnavailableError("the HTTP server is stopping");
    }
    if (exchange.client_gone()) {
      stream->Cancel();
      return absl::CancelledError("the client went away");
    }
    StreamUpdate update = stream->Wait(kPoll);
    if (!update.done) continue;
    RETURN_IF_ERROR(update.status);
    return PromptLogprobs(update.logits, prompt, engine.options().vocab_size, top_k);
  }
}

// Completions' echo: what each choice starts with.
struct Echo {
  std::string text;
  std::vector<TokenLogprob> logprobs;  // with logprobs: one per prompt token
};

// One streaming response: every sample's chunks as they come, interleaved.
struct EventStream {
  const Engine* engine;  // asked whether the cluster is paused
  SampleStreams samples;
  OpenAiResponder responder;
  bool include_usage = false;
  bool with_logprobs = false;
  std::optional<ToolCallSyntax> tool_syntax;  // replies' tool calls streamed as tool_calls
  std::optional<Echo> echo;                   // sent as each sample's first chunk
};

// Writes the whole event stream to `exchange`. False when the client went away or the server
// stops: the samples are cancelled.
bool WriteEvents(EventStream& events, HttpExchange& exchange, const std::atomic<bool>& stopping) {
  SampleStreams& samples = events.samples;
  absl::Time last_write = absl::Now();
  auto write = [&exchange, &last_write](const std::string& data) {
    last_write = absl::Now();
    return exchange.WriteChunk(data);
  };
  auto give_up = [&samples] {
    samples.CancelAll();
    return false;
  };
  const bool chat = events.responder.header().endpoint == OpenAiEndpoint::kChatCompletions;
  if (chat) {
    for (size_t i = 0; i < samples.size(); ++i) {
      if (!write(SseEvent(events.responder.RoleChunk(static_cast<int32_t>(i))))) return give_up();
    }
  }
  std::vector<int32_t> text_offsets(samples.size(), 0);
  if (events.echo.has_value()) {
    for (size_t i = 0; i < samples.size(); ++i) {
      const int32_t index = static_cast<int32_t>(i);
      if (!write(SseEvent(events.responder.DeltaChunk(index, events.echo->text,
                                                      events.echo->logprobs, std::nullopt,
                                                      &text_offsets[i])))) {
        return give_up();
      }
    }
  }
  std::vector<ToolCallStream> tool_streams;
  std::vector<int32_t> tool_calls(samples.size(), 0);  // calls streamed per sample
  if (events.tool_syntax.has_value()) {
    tool_streams.assign(samples.size(), ToolCallStream(*events.tool_syntax));
  }
  Usage usage;
  while (!samples.done()) {
    if (exchange.client_gone()) return give_up();
    if (stopping.load()) {
      // Cut, but not silently: the client learns its answer is incomplete and why.
      LogWarning(kLog, "request %d: cut while streaming: the HTTP server is stopping",
                 samples.request_id());
      write(absl::StrCat("data: ", ErrorBody(absl::UnavailableError("the HTTP server is stopping")),
                         "\n\n"));
      write(kSseDone);
      return give_up();
    }
    std::optional<SampleStreams::News> news = samples.Next(kPoll);
    if (!news.has_value()) {
      if (absl::Now() - last_write < kKeepAliveEvery) continue;
      if (std::optional<Engine::Pause> pause = events.engine->pause(); pause.has_value()) {
        if (!write(KeepAliveComment(*pause))) return give_up();
      }
      continue;
    }
    const int32_t i = news->index;
    const StreamUpdate& update = news->update;
    if (update.done && !update.status.ok()) {
      // The response is already 200: the error travels as an event, as OpenAI's does.
      LogWarning(kLog, "request %d: failed while streaming: %s", samples.request_id(),
                 update.status.ToString());
      samples.CancelAll();
      write(absl::StrCat("data: ", ErrorBody(update.status), "\n\n"));
      write(kSseDone);
      return true;
    }
    const bool has_logprobs = events.with_logprobs && !update.logprobs.empty();
    std::optional<FinishReason> finish;
    if (update.done) finish = update.finish_reason;
    if (!tool_streams.empty()) {
      // Content as the parser releases it, each call once whole, the finish after them.
      ToolCallDelta delta = tool_streams[i].Add(update.text);
      if (update.done) {
        ToolCallDelta tail = tool_streams[i].Finish();
        delta.content += tail.content;
      }
      if (!delta.content.empty() || has_logprobs) {
        if (!write(SseEvent(events.responder.DeltaChunk(i, delta.content, update.logprobs,
                                                        std::nullopt, &text_offsets[i])))) {
          return give_up();
        }
      }
      if (!delta.calls.empty()) {
        if (!write(SseEvent(events.responder.ToolCallsChunk(i, delta.calls, tool_calls[i])))) {
          return give_up();
        }
        tool_calls[i] += static_cast<int32_t>(delta.calls.size());
      }
      if (update.done) {
        if (!write(SseEvent(events.responder.DeltaChunk(i, "", {}, finish, &text_offsets[i],
                                                        tool_calls[i] > 0)))) {
          return give_up();
        }
        AddUsage(update, i, &usage);
      }
      continue;
    }
    if (update.text.empty() && !has_logprobs && !update.done) continue;
    const std::string event = SseEvent(
        events.responder.DeltaChunk(i, update.text, update.logprobs, finish, &text_offsets[i]));
    if (!write(event)) return give_up();
    if (update.done) AddUsage(update, i, &usage);
  }
  if (events.include_usage && !write(SseEvent(events.responder.UsageChunk(usage)))) {
    return give_up();
  }
  return write(kSseDone) || give_up();
}

enum class Endpoint { kCompletions, kChatCompletions, kModels, kHealth, kReady, kMetrics };

// Every route with the one method it takes: another method on a known path is a 405 naming it.
struct Route {
  const char* path;
  const char* method;
  Endpoint endpoint;
};
constexpr Route kRoutes[] = {
    {"/v1/completions", "POST", Endpoint::kCompletions},
    {"/v1/chat/completions", "POST", Endpoint::kChatCompletions},
    {"/v1/models", "GET", Endpoint::kModels},
    {"/health", "GET", Endpoint::kHealth},
    {"/health/ready", "GET", Endpoint::kReady},
    {"/metrics", "GET", Endpoint::kMetrics},
};

std::string StartingMessage() { return "cluster is starting: workers are not loaded yet"; }

}  // namespace

HttpServer::HttpServer(HttpServerOptions options)
    : options_(std::move(options)), started_(absl::Now()) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<int> HttpServer::Start(const std::string& host, int port) {
  listener_ = std::make_unique<HttpListener>(
      options_.limits, [this](const HttpRequest& head) { return Admit(head); },
      [this](std::shared_ptr<HttpExchange> exchange, HttpRequest request) {
        Dispatch(std::move(exchange), std::move(request));
      },
      [](int status, const std::string& message) {
        return ErrorReply(absl::InvalidArgumentError(message), status);
      });
  return listener_->Start(host, port);
}

bool HttpServer::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mutex_);
  return mutex_.AwaitWithDeadline(
      absl::Condition(+[](int* running) { return *running == 0; }, &running_), deadline);
}

void HttpServer::Stop() {
  stopping_.store(true);
  if (listener_ == nullptr) return;
  listener_->BeginStop();
  // Each generation thread sees stopping_ within kPoll and answers.
  WaitIdle(absl::InfiniteFuture());
  listener_->Stop();
}

std::optional<HttpReply> HttpServer::Admit(const HttpRequest& head) const {
  if (options_.api_keys == nullptr || !absl::StartsWith(head.path, "/v1/") ||
      options_.api_keys->Accepts(head.authorization)) {
    return std::nullopt;
  }
  LogWarning(kLog, "%s %s from %s refused: no valid API key", head.method, head.path, head.peer);
  options_.metrics->AddAuthFailure(kSurfaceHttp);
  return ErrorReply(InvalidApiKey());
}

void HttpServer::Dispatch(std::shared_ptr<HttpExchange> exchange, HttpRequest request) {
  const std::string& path = request.path;
  const Route* route = nullptr;
  for (const Route& r : kRoutes) {
    if (path == r.path) route = &r;
  }
  const std::string what = absl::StrCat(request.method, " ", path);
  if (route == nullptr) {
    return exchange->Reply(ErrorReply(absl::NotFoundError(what + ": no such endpoint")));
  }
  if (request.method != route->method) {
    HttpReply refused = ErrorReply(
        absl::InvalidArgumentError(absl::StrCat(what, ": method not allowed; use ", route->method)),
        405);
    refused.headers.emplace_back("Allow", route->method);
    return exchange->Reply(std::move(refused));
  }
  switch (route->endpoint) {
    case Endpoint::kCompletions:
      return SpawnGenerate(OpenAiEndpoint::kCompletions, std::move(exchange), std::move(request));
    case Endpoint::kChatCompletions:
      return SpawnGenerate(OpenAiEndpoint::kChatCompletions, std::move(exchange),
                           std::move(request));
    case Endpoint::kModels:
      return exchange->Reply(Models());
    case Endpoint::kHealth:
      return exchange->Reply(Health());
    case Endpoint::kReady:
      return exchange->Reply(Ready());
    case Endpoint::kMetrics:
      return exchange->Reply(MetricsText());
  }
}

void HttpServer::SpawnGenerate(OpenAiEndpoint endpoint, std::shared_ptr<HttpExchange> exchange,
                               HttpRequest request) {
  {
    absl::MutexLock lock(&mutex_);
    ++running_;
  }
  std::thread([this, endpoint, exchange = std::move(exchange),
               request = std::move(request)]() mutable {
    try {
      HandleGenerate(endpoint, request, *exchange);
    } catch (const std::exception& e) {
      LogError(kLog, "%s %s: uncaught exception: %s", request.method, request.path, e.what());
      if (!exchange->ended()) {
        exchange->Reply(
            ErrorReply(absl::InternalError(absl::StrCat("internal error: ", e.what()))));
      }
    }
    // The exchange goes before the count: Stop may destroy the listener right after.
    exchange.reset();
    absl::MutexLock lock(&mutex_);
    --running_;
  }).detach();
}

void HttpServer::HandleGenerate(OpenAiEndpoint endpoint, const HttpRequest& request,
                                HttpExchange& exchange) {
  Engine* engine = engine_.load();
  if (engine == nullptr) {
    return exchange.Reply(ErrorReply(absl::UnavailableError(StartingMessage())));
  }
  const ServedModel model{options_.model_name,     engine->options().context_length,
                          options_.tokenizer,      options_.chat_template,
                          options_.default_sampling, engine->options().limits};
  absl::StatusOr<OpenAiRequest> parsed = endpoint == OpenAiEndpoint::kCompletions
                                             ? ParseCompletionRequest(request.body, model)
                                             : ParseChatRequest(request.body, model);
  if (!parsed.ok()) return exchange.Reply(ErrorReply(parsed.status()));
  const bool with_logprobs = parsed->params.logprobs >= 0;
  const std::optional<ToolCallSyntax> tool_syntax = parsed->tool_syntax;
  // The prompt's log-probabilities come first, from a Score request of their own.
  std::vector<TokenLogprob> prompt_logprobs;
  absl::Status scored = absl::OkStatus();
  if (parsed->prompt_logprobs >= 0) {
    absl::StatusOr<std::vector<TokenLogprob>> lp = ScorePrompt(
        *engine, parsed->params.prompt, parsed->prompt_logprobs, stopping_, exchange);
    scored = lp.status();
    if (lp.ok()) prompt_logprobs = *std::move(lp);
  }
  absl::StatusOr<Streams> streams =
      scored.ok() ? engine->SubmitGenerate(std::move(parsed->params),
                                           [&exchange] { return exchange.client_gone(); })
                  : absl::StatusOr<Streams>(scored);
  if (!streams.ok()) {
    // The request's own fields are checked already: what the engine refuses is the prompt
    // (too long for the context or the KV pool) unless it names another field (max_tokens, when
    // prompt and completion together pass the context).
    absl::Status status = streams.status();
    if (status.code() == absl::StatusCode::kInvalidArgument && !HasParam(status)) {
      status = WithParam(std::move(status), parsed->prompt_field());
    }
    return exchange.Reply(ErrorReply(status));
  }
  const uint64_t request_id = streams->front()->request_id();
  if (!parsed->ignored_fields.empty()) {
    LogInfo(kLog, "request %d: fields no API defines, which change nothing: %s", request_id,
            absl::StrJoin(parsed->ignored_fields, ", "));
  }
  std::optional<Echo> echo;
  if (parsed->echo) {
    echo.emplace();
    echo->text = parsed->echo_text;
    if (with_logprobs) echo->logprobs = prompt_logprobs;
  }
  OpenAiResponder responder(
      MakeResponseHeader(endpoint, request_id, options_.model_name, absl::Now()),
      options_.tokenizer, with_logprobs);
  const std::pair<std::string, std::string> id_header{kRequestIdHeader, std::to_string(request_id)};

  if (!parsed->stream) {
    SampleStreams samples(*std::move(streams));
    absl::StatusOr<Completed> completed = WaitAll(samples, stopping_, exchange, tool_syntax);
    if (completed.ok()) {
      for (ChoiceOutput& choice : completed->choices) {
        if (echo.has_value()) {
          choice.text = echo->text + choice.text;
          choice.logprobs.insert(choice.logprobs.begin(), echo->logprobs.begin(),
                                 echo->logprobs.end());
        }
        if (parsed->return_prompt_logprobs) choice.prompt_logprobs = prompt_logprobs;
      }
    }
    HttpReply reply = completed.ok()
                          ? JsonReply(200, responder.Response(completed->choices, completed->usage))
                          : ErrorReply(completed.status());
    if (absl::IsCancelled(completed.status())) reply.status = 499;  // nginx's "client closed"
    reply.headers.push_back(id_header);
    reply.request_id = request_id;
    return exchange.Reply(std::move(reply));
  }
  EventStream events{engine,
                     SampleStreams(*std::move(streams)),
                     std::move(responder),
                     parsed->include_usage,
                     with_logprobs,
                     tool_syntax,
                     std::move(echo)};
  HttpReply head{200, "text/event-stream", {{"Cache-Control", "no-cache"}, id_header}, ""};
  head.request_id = request_id;
  if (exchange.StartStream(head)) {
    WriteEvents(events, exchange, stopping_);
  } else {
    events.samples.CancelAll();
  }
  exchange.EndStream();
}

HttpReply HttpServer::Models() const {
  const Engine* engine = engine_.load();
  const int64_t context_length =
      engine != nullptr ? engine->options().context_length : options_.context_length;
  return JsonReply(200, {{"object", "list"},
                         {"data", json::array({{{"id", options_.model_name},
                                                {"object", "model"},
                                                {"created", absl::ToUnixSeconds(started_)},
                                                {"owned_by", "tpserve"},
                                                {"max_model_len", context_length}}})}});
}

HttpReply HttpServer::Health() const {
  const Engine* engine = engine_.load();
  if (engine == nullptr) {
    return JsonReply(200, {{"status", "starting"}, {"message", StartingMessage()}});
  }
  if (const absl::Status health = engine->health(); !health.ok()) {
    return JsonReply(503, {{"status", "unavailable"}, {"message", std::string(health.message())}});
  }
  return JsonReply(200, {{"status", engine->draining() ? "draining" : "serving"}});
}

HttpReply HttpServer::Ready() const {
  const Engine* engine = engine_.load();
  if (engine == nullptr) {
    return JsonReply(503, {{"status", "starting"}, {"message", StartingMessage()}});
  }
  if (const absl::Status health = engine->health(); !health.ok()) {
    return JsonReply(503, {{"status", "unavailable"}, {"message", std::string(health.message())}});
  }
  if (engine->draining()) {
    return JsonReply(503, {{"status", "draining"},
                           {"message", "the server is draining: it accepts no new requests"}});
  }
  return JsonReply(200, {{"status", "ready"}});
}

HttpReply HttpServer::MetricsText() const {
  return {200, "text/plain; version=0.0.4", {}, options_.metrics->RenderPrometheus()};
}

}  // namespace tpserve
