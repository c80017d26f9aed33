#include "coordinator/http_server.h"

#include <sys/socket.h>

#include <chrono>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/openai_error.h"
#include "coordinator/openai_response.h"
#include "coordinator/sample_streams.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::json;
using Streams = std::vector<std::shared_ptr<RequestStream>>;

constexpr char kLog[] = "http";
// How long a request thread waits on the engine before it looks at the client and at Stop().
constexpr absl::Duration kPoll = absl::Milliseconds(50);
// Token-id prompts of a full context are ~100 KB of JSON; this leaves room without letting one
// client make the server hold gigabytes.
constexpr size_t kMaxBodyBytes = 32 << 20;
constexpr char kJson[] = "application/json";
constexpr char kRequestIdHeader[] = "X-Request-Id";
constexpr size_t kLoggedErrorBytes = 300;

void ReplyError(httplib::Response& response, const absl::Status& status) {
  response.status = HttpStatusOf(status);
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    response.set_header("Retry-After", "1");
  }
  response.set_content(ErrorBody(status), kJson);
}

void ReplyJson(httplib::Response& response, int status, const json& body) {
  response.status = status;
  response.set_content(Dump(body), kJson);
}

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

// Waits for every sample. The first failure cancels the others and is returned.
absl::StatusOr<Completed> WaitAll(SampleStreams& samples, const std::atomic<bool>& stopping) {
  Completed result;
  result.choices.resize(samples.size());
  while (!samples.done()) {
    if (stopping.load()) {
      samples.CancelAll();
      return absl::UnavailableError("the HTTP server is stopping");
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
    AddUsage(update, news->index, &result.usage);
  }
  return result;
}

// One streaming response: every sample's chunks as they come, interleaved.
struct EventStream {
  SampleStreams samples;
  OpenAiResponder responder;
  bool include_usage = false;
  bool with_logprobs = false;
};

// Writes the whole event stream to `sink`. False when the client went away or the server
// stops: the samples are cancelled.
bool WriteEvents(EventStream& events, httplib::DataSink& sink, const std::atomic<bool>& stopping) {
  SampleStreams& samples = events.samples;
  auto write = [&sink](const std::string& data) { return sink.write(data.data(), data.size()); };
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
  Usage usage;
  while (!samples.done()) {
    if (stopping.load() || !sink.is_writable()) return give_up();
    std::optional<SampleStreams::News> news = samples.Next(kPoll);
    if (!news.has_value()) continue;
    const int32_t i = news->index;
    const StreamUpdate& update = news->update;
    if (update.done && !update.status.ok()) {
      // The response is already 200: the error travels as an event, as OpenAI's does.
      LogWarning(kLog, "request %d: failed while streaming: %s", samples.request_id(),
                 update.status.ToString());
      samples.CancelAll();
      write(absl::StrCat("data: ", ErrorBody(update.status), "\n\n"));
      write(kSseDone);
      sink.done();
      return true;
    }
    const bool has_logprobs = events.with_logprobs && !update.logprobs.empty();
    if (update.text.empty() && !has_logprobs && !update.done) continue;
    std::optional<FinishReason> finish;
    if (update.done) finish = update.finish_reason;
    const std::string event = SseEvent(
        events.responder.DeltaChunk(i, update.text, update.logprobs, finish, &text_offsets[i]));
    if (!write(event)) return give_up();
    if (update.done) AddUsage(update, i, &usage);
  }
  if (events.include_usage && !write(SseEvent(events.responder.UsageChunk(usage)))) {
    return give_up();
  }
  if (!write(kSseDone)) return give_up();
  sink.done();
  return true;
}

// What httplib refused before any handler ran.
absl::Status HttplibError(const httplib::Request& request, int http_status) {
  const std::string what = absl::StrCat(request.method, " ", request.path);
  switch (http_status) {
    case 404:
      return absl::NotFoundError(absl::StrCat(what, ": no such endpoint"));
    case 413:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the request body is larger than ", kMaxBodyBytes, " bytes"));
    default:
      return absl::InvalidArgumentError(absl::StrCat(what, ": HTTP ", http_status));
  }
}

std::string StartingMessage() { return "cluster is starting: workers are not loaded yet"; }

}  // namespace

HttpServer::HttpServer(HttpServerOptions options)
    : options_(std::move(options)), started_(absl::Now()) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<int> HttpServer::Start(const std::string& host, int port) {
  server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *server_;
  server.new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
  server.set_payload_max_length(kMaxBodyBytes);
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(OpenAiEndpoint::kCompletions, req, res);
  });
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(OpenAiEndpoint::kChatCompletions, req, res);
  });
  server.Get("/v1/models",
             [this](const httplib::Request&, httplib::Response& res) { HandleModels(res); });
  server.Get("/health",
             [this](const httplib::Request&, httplib::Response& res) { HandleHealth(res); });
  server.Get("/health/ready",
             [this](const httplib::Request&, httplib::Response& res) { HandleReady(res); });
  server.Get("/metrics",
             [this](const httplib::Request&, httplib::Response& res) { HandleMetrics(res); });
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_keys == nullptr || !absl::StartsWith(req.path, "/v1/") ||
        options_.api_keys->Accepts(req.get_header_value("Authorization"))) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    LogWarning("http", "%s %s from %s refused: no valid API key", req.method, req.path,
               req.remote_addr);
    options_.metrics->AddAuthFailure(kSurfaceHttp);
    const absl::Status refused = InvalidApiKey();
    res.status = HttpStatusOf(refused);
    res.set_content(ErrorBody(refused), kJson);
    return httplib::Server::HandlerResponse::Handled;
  });
  // What httplib answers itself (unknown routes, oversized bodies, bad request lines) gets an
  // OpenAI error body too.
  server.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        res.set_content(ErrorBody(HttplibError(req, res.status)), kJson);
        return httplib::Server::HandlerResponse::Handled;
      }));
  // A last resort: handlers catch what they expect.
  server.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LogError(kLog, "%s %s: uncaught exception: %s", req.method, req.path, what);
        ReplyError(res, absl::InternalError(absl::StrCat("internal error: ", what)));
      });
  server.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    const std::string id = res.get_header_value(kRequestIdHeader);
    // A refusal's body is the OpenAI error, which says why.
    const std::string why = res.status >= 400 ? res.body.substr(0, kLoggedErrorBytes) : "";
    LogInfo(kLog, "%s %s from %s:%d: %d%s%s%s%s", req.method, req.path, req.remote_addr,
            req.remote_port, res.status, id.empty() ? "" : ", request ", id, why.empty() ? "" : " ",
            why);
  });

  // Debian's compiled httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG): dozens of
  // clients connecting while the workers hold every core overflow it (TcpExtListenOverflows),
  // and clients see connection resets. The listening socket goes through this hook, so its
  // backlog is raised right after bind.
  int listen_fd = -1;
  server.set_socket_options([&listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd = sock;
  });
  const int bound =
      port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port));
  }
  if (listen_fd < 0 || ::listen(listen_fd, SOMAXCONN) != 0) {
    LogWarning(kLog, "could not raise the listen backlog of %s:%d to %d", host, bound, SOMAXCONN);
  }
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    accept_loop_ended_.store(true);
  });
  // httplib's stop() does nothing to a server whose accept loop has not started yet.
  while (!server.is_running() && !accept_loop_ended_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return bound;
}

void HttpServer::Stop() {
  stopping_.store(true);
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpServer::HandleGenerate(OpenAiEndpoint endpoint, const httplib::Request& request,
                                httplib::Response& response) {
  Engine* engine = engine_.load();
  if (engine == nullptr) return ReplyError(response, absl::UnavailableError(StartingMessage()));
  const ServedModel model{options_.model_name, engine->options().context_length, options_.tokenizer,
                          options_.chat_template};
  absl::StatusOr<OpenAiRequest> parsed = endpoint == OpenAiEndpoint::kCompletions
                                             ? ParseCompletionRequest(request.body, model)
                                             : ParseChatRequest(request.body, model);
  if (!parsed.ok()) return ReplyError(response, parsed.status());
  const bool with_logprobs = parsed->params.logprobs >= 0;
  absl::StatusOr<Streams> streams = engine->SubmitGenerate(std::move(parsed->params));
  if (!streams.ok()) {
    // The request's own fields are checked already: what the engine refuses is the prompt
    // (too long for the context or the KV pool) unless it names another field (max_tokens, when
    // prompt and completion together pass the context).
    absl::Status status = streams.status();
    if (status.code() == absl::StatusCode::kInvalidArgument && !HasParam(status)) {
      status = WithParam(std::move(status), parsed->prompt_field());
    }
    return ReplyError(response, status);
  }
  const uint64_t request_id = streams->front()->request_id();
  response.set_header(kRequestIdHeader, std::to_string(request_id));
  OpenAiResponder responder(
      MakeResponseHeader(endpoint, request_id, options_.model_name, absl::Now()),
      options_.tokenizer, with_logprobs);

  if (!parsed->stream) {
    SampleStreams samples(*std::move(streams));
    absl::StatusOr<Completed> completed = WaitAll(samples, stopping_);
    if (!completed.ok()) return ReplyError(response, completed.status());
    return ReplyJson(response, 200, responder.Response(completed->choices, completed->usage));
  }
  auto events = std::make_shared<EventStream>(
      EventStream{SampleStreams(*std::move(streams)), std::move(responder), parsed->include_usage,
                  with_logprobs});
  response.set_header("Cache-Control", "no-cache");
  response.set_chunked_content_provider(
      "text/event-stream",
      [this, events](size_t, httplib::DataSink& sink) {
        try {
          return WriteEvents(*events, sink, stopping_);
        } catch (const std::exception& e) {
          LogError(kLog, "request %d: streaming failed: %s", events->samples.request_id(),
                   e.what());
          return false;
        }
      },
      // Runs when the response is destroyed, also when the provider never ran because the
      // client left first; cancelling finished samples does nothing.
      [events](bool) { events->samples.CancelAll(); });
}

void HttpServer::HandleModels(httplib::Response& response) const {
  const Engine* engine = engine_.load();
  const int64_t context_length =
      engine != nullptr ? engine->options().context_length : options_.context_length;
  ReplyJson(response, 200,
            {{"object", "list"},
             {"data", json::array({{{"id", options_.model_name},
                                    {"object", "model"},
                                    {"created", absl::ToUnixSeconds(started_)},
                                    {"owned_by", "tpserve"},
                                    {"max_model_len", context_length}}})}});
}

void HttpServer::HandleHealth(httplib::Response& response) const {
  const Engine* engine = engine_.load();
  if (engine == nullptr) {
    return ReplyJson(response, 200, {{"status", "starting"}, {"message", StartingMessage()}});
  }
  if (const absl::Status health = engine->health(); !health.ok()) {
    return ReplyJson(response, 503,
                     {{"status", "unavailable"}, {"message", std::string(health.message())}});
  }
  ReplyJson(response, 200, {{"status", engine->draining() ? "draining" : "serving"}});
}

void HttpServer::HandleReady(httplib::Response& response) const {
  const Engine* engine = engine_.load();
  if (engine == nullptr) {
    return ReplyJson(response, 503, {{"status", "starting"}, {"message", StartingMessage()}});
  }
  if (const absl::Status health = engine->health(); !health.ok()) {
    return ReplyJson(response, 503,
                     {{"status", "unavailable"}, {"message", std::string(health.message())}});
  }
  if (engine->draining()) {
    return ReplyJson(response, 503,
                     {{"status", "draining"},
                      {"message", "the server is draining: it accepts no new requests"}});
  }
  ReplyJson(response, 200, {{"status", "ready"}});
}

void HttpServer::HandleMetrics(httplib::Response& response) const {
  response.set_content(options_.metrics->RenderPrometheus(), "text/plain; version=0.0.4");
}

}  // namespace tpserve
