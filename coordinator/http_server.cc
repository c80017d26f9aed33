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
  kMessages,
  kResponses,
  kStoredResponse,
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
    {"/v1/messages", "POST", Endpoint::kMessages},
    {"/v1/responses", "POST", Endpoint::kResponses},
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
constexpr char kResponsePrefix[] = "/v1/responses/";

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
  constexpr Route kResponseRoute = {kResponsePrefix, "GET", Endpoint::kStoredResponse};
  if (route == nullptr && absl::StartsWith(path, kModelPrefix)) route = &kModelRoute;
  if (route == nullptr && absl::StartsWith(path, kResponsePrefix)) route = &kResponseRoute;
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
      return Generate(GenerationApi::kCompletions, std::move(exchange), std::move(request));
    case Endpoint::kChatCompletions:
      return Generate(GenerationApi::kChatCompletions, std::move(exchange), std::move(request));
    case Endpoint::kMessages:
      return Generate(GenerationApi::kMessages, std::move(exchange), std::move(request));
    case Endpoint::kResponses:
      return Generate(GenerationApi::kResponses, std::move(exchange), std::move(request));
    case Endpoint::kStoredResponse:
      return exchange->Reply(StoredResponseReply(path.substr(sizeof(kResponsePrefix) - 1)));
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

void HttpServer::Generate(GenerationApi api, std::shared_ptr<HttpExchange> exchange,
                          HttpRequest request) {
  Engine* engine = engine_.load();
  if (engine == nullptr) {
    return exchange->Reply(ApiErrorReply(api, absl::UnavailableError(StartingMessage())));
  }
  HttpGeneration::Start(generations_, engine, api, std::move(exchange), std::move(request));
}

HttpReply HttpServer::StoredResponseReply(const std::string& id) const {
  std::optional<StoredResponse> stored = generations_->responses().Get(id);
  if (!stored.has_value()) {
    return ErrorReply(absl::NotFoundError("no stored response has this id"));
  }
  return JsonReply(200, json(stored->response));
}

int64_t HttpServer::ContextLength() const {
  const Engine* engine = engine_.load();
  return engine != nullptr ? engine->options().context_length : options_.context_length;
}

nlohmann::json HttpServer::ModelObject(const std::string& id) const {
  // vLLM's shape: an adapter's root is its folder, its parent the base model.
  json model = {{"id", id},
                {"object", "model"},
                {"created", absl::ToUnixSeconds(started_)},
                {"owned_by", "tpserve"},
                {"root", id},
                {"parent", nullptr},
                {"max_model_len", ContextLength()}};
  for (const LoraModule& lora : generations_->Loras()) {
    if (lora.name != id) continue;
    model["root"] = lora.path;
    model["parent"] = options_.model_name;
  }
  return model;
}

HttpReply HttpServer::Models() const {
  json data = json::array({ModelObject(options_.model_name)});
  for (const LoraModule& lora : generations_->Loras()) data.push_back(ModelObject(lora.name));
  return JsonReply(200, {{"object", "list"}, {"data", std::move(data)}});
}

HttpReply HttpServer::Model(const std::string& id) const {
  const std::vector<LoraModule> loras = generations_->Loras();
  if (!LoraNamed(loras, options_.model_name, id).has_value()) {
    return ErrorReply(absl::NotFoundError(
        absl::StrCat("model '", id, "' does not exist; this server serves '", options_.model_name,
                     "'", loras.empty() ? "" : " and its LoRA adapters (GET /v1/models)")));
  }
  return JsonReply(200, ModelObject(id));
}

void HttpServer::TokenizerEndpoint(bool encode, std::shared_ptr<HttpExchange> exchange,
                                   HttpRequest request) {
  // Before the engine runs, a chat prompt is judged with the default request limits.
  const Engine* engine = engine_.load();
  ServedModel model = engine != nullptr ? generations_->Model(*engine) : generations_->Model();
  model.context_length = ContextLength();
  auto task = [encode, exchange, request = std::move(request), model = std::move(model)] {
    exchange->Reply(encode ? TokenizeReply(model, request.body)
                           : DetokenizeReply(*model.tokenizer, request.body));
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
