#include "coordinator/http_server.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/auth_refusal.h"
#include "common/logging.h"
#include "coordinator/http_replies.h"
#include "coordinator/http_tokenize.h"
#include "coordinator/openai_error.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::json;

constexpr char kLog[] = "http";

enum class Endpoint {
  kCompletions,
  kChatCompletions,
  kModels,
  kModel,
  kTokenize,
  kDetokenize,
  kVersion,
  kHealth,
  kReady,
  kMetrics
};

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
    {"/tokenize", "POST", Endpoint::kTokenize},
    {"/detokenize", "POST", Endpoint::kDetokenize},
    {"/version", "GET", Endpoint::kVersion},
    {"/health", "GET", Endpoint::kHealth},
    {"/health/ready", "GET", Endpoint::kReady},
    {"/metrics", "GET", Endpoint::kMetrics},
};

std::string StartingMessage() { return "cluster is starting: workers are not loaded yet"; }

constexpr char kModelPrefix[] = "/v1/models/";

// The OpenAI API, and the tokenizer endpoints (they cost the server work): with API keys
// configured, none answers without one.
bool NeedsKey(const std::string& path) {
  return absl::StartsWith(path, "/v1/") || path == "/tokenize" || path == "/detokenize";
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options)
    : options_(std::move(options)),
      started_(absl::Now()),
      generations_(std::make_shared<HttpGenerations>(options_, *options_.pool)) {}

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

bool HttpServer::WaitIdle(absl::Time deadline) { return generations_->WaitNone(deadline); }

void HttpServer::Stop() {
  if (listener_ == nullptr) return;
  listener_->BeginStop();
  generations_->CutAll();
  WaitIdle(absl::InfiniteFuture());
  listener_->Stop();
}

std::optional<HttpReply> HttpServer::Admit(const HttpRequest& head) const {
  if (options_.api_keys == nullptr || !NeedsKey(head.path) ||
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
  constexpr Route kModelRoute = {kModelPrefix, "GET", Endpoint::kModel};
  if (route == nullptr && absl::StartsWith(path, kModelPrefix)) route = &kModelRoute;
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
      return Generate(OpenAiEndpoint::kCompletions, std::move(exchange), std::move(request));
    case Endpoint::kChatCompletions:
      return Generate(OpenAiEndpoint::kChatCompletions, std::move(exchange), std::move(request));
    case Endpoint::kModels:
      return exchange->Reply(Models());
    case Endpoint::kModel:
      return exchange->Reply(Model(path.substr(sizeof(kModelPrefix) - 1)));
    case Endpoint::kTokenize:
    case Endpoint::kDetokenize:
      return TokenizerEndpoint(route->endpoint == Endpoint::kTokenize, std::move(exchange),
                               std::move(request));
    case Endpoint::kVersion:
      return exchange->Reply(JsonReply(200, {{"version", TPSERVE_VERSION}}));
    case Endpoint::kHealth:
      return exchange->Reply(Health());
    case Endpoint::kReady:
      return exchange->Reply(Ready());
    case Endpoint::kMetrics:
      return exchange->Reply(MetricsText());
  }
}

void HttpServer::Generate(OpenAiEndpoint endpoint, std::shared_ptr<HttpExchange> exchange,
                          HttpRequest request) {
  Engine* engine = engine_.load();
  if (engine == nullptr) {
    return exchange->Reply(ErrorReply(absl::UnavailableError(StartingMessage())));
  }
  HttpGeneration::Start(generations_, engine, endpoint, std::move(exchange), std::move(request));
}

int64_t HttpServer::ContextLength() const {
  const Engine* engine = engine_.load();
  return engine != nullptr ? engine->options().context_length : options_.context_length;
}

nlohmann::json HttpServer::ModelObject() const {
  return {{"id", options_.model_name},
          {"object", "model"},
          {"created", absl::ToUnixSeconds(started_)},
          {"owned_by", "tpserve"},
          {"max_model_len", ContextLength()}};
}

HttpReply HttpServer::Models() const {
  return JsonReply(200, {{"object", "list"}, {"data", json::array({ModelObject()})}});
}

HttpReply HttpServer::Model(const std::string& id) const {
  if (id != options_.model_name) {
    return ErrorReply(absl::NotFoundError(absl::StrCat(
        "model '", id, "' does not exist; this server serves '", options_.model_name, "'")));
  }
  return JsonReply(200, ModelObject());
}

void HttpServer::TokenizerEndpoint(bool encode, std::shared_ptr<HttpExchange> exchange,
                                   HttpRequest request) {
  const int64_t context_length = ContextLength();
  const Tokenizer* tokenizer = options_.tokenizer;
  auto task = [encode, exchange, request = std::move(request), tokenizer, context_length] {
    exchange->Reply(encode ? TokenizeReply(*tokenizer, context_length, request.body)
                           : DetokenizeReply(*tokenizer, request.body));
  };
  if (!options_.pool->TryPost(std::move(task))) {
    exchange->Reply(ErrorReply(
        absl::UnavailableError("the server is busy: too many requests wait to be parsed")));
  }
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
