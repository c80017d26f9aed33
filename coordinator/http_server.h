// The coordinator's HTTP front end: the OpenAI-compatible API over the engine, health checks
// and Prometheus metrics. The protocol side (connections, limits, timeouts) is HttpListener's.
//
//   POST /v1/completions, /v1/chat/completions   JSON, or SSE with "stream": true
//   GET  /v1/models                              the one served model
//   GET  /health        200 while the process serves and the cluster is not degraded, else 503
//   GET  /health/ready  200 once every shard is loaded (SetEngine) and while neither degraded
//                       nor draining, else 503; the body says why
//   GET  /metrics       Metrics::RenderPrometheus(), text format 0.0.4
//
// With API keys configured, /v1/* without `Authorization: Bearer <key>` answer 401
// (code "invalid_api_key") before anything else. Until SetEngine, /v1/* answer 503 "cluster is
// starting". Errors are OpenAI error bodies (openai_error.h); 429 and 503 carry
// `Retry-After: 1`. Every response to an accepted request carries `X-Request-Id`, the engine's
// request id; one log line per request names it.
//
// Generations are HttpGeneration's: a client that goes away, streaming or not, cancels its
// samples; while the engine holds requests for a lost rank, their event streams get the SSE
// comment ": paused, waiting for <what>" about every second.
//
// Threads: health, readiness, metrics and models are answered on the listener's I/O threads, so
// they answer however many generations run or how many clients stall. A generation has no
// thread: its parsing runs on the FrontEndPool, its writes on an I/O thread as the engine's
// news arrives.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/bearer_keys.h"
#include "coordinator/engine.h"
#include "coordinator/http_exchange.h"
#include "coordinator/http_generation.h"
#include "coordinator/http_listener.h"
#include "coordinator/http_message.h"
#include "coordinator/http_server_options.h"
#include "coordinator/metrics.h"
#include "coordinator/openai_request.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tpserve {

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();  // Stop()

  // Listens on host:port (0: any free port) and serves on its own threads; returns the port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  // Waits until no generation is being answered, or `deadline`; true when none is.
  bool WaitIdle(absl::Time deadline);
  // Ends every request in flight (streams end with an error event and are cancelled; waiting
  // clients get 503), waits until they are gone and closes every connection. Idempotent.
  void Stop();

  // From now on /v1/* go to `engine`, which must outlive the server (or Stop() first).
  void SetEngine(Engine* engine) { engine_.store(engine); }

 private:
  // On the I/O thread, from a request's head: 401 before its body is read when /v1/* lacks a key.
  std::optional<HttpReply> Admit(const HttpRequest& head) const;
  // On the I/O thread: routes one request.
  void Dispatch(std::shared_ptr<HttpExchange> exchange, HttpRequest request);
  // Hands a generation to HttpGeneration, or 503 while the cluster starts.
  void Generate(GenerationApi api, std::shared_ptr<HttpExchange> exchange, HttpRequest request);
  // The context length served: the engine's once it runs.
  int64_t ContextLength() const;
  nlohmann::json ModelObject(const std::string& id) const;
  HttpReply Models() const;
  HttpReply Model(const std::string& id) const;  // /v1/models/{id}; 404 for another id
  // GET /v1/responses/{id}: a stored response; 404 once it is gone (or was never stored).
  HttpReply StoredResponseReply(const std::string& id) const;
  // /tokenize (`encode`) or /detokenize, on the front-end pool.
  void TokenizerEndpoint(bool encode, std::shared_ptr<HttpExchange> exchange, HttpRequest request);
  HttpReply Health() const;
  HttpReply Ready() const;
  HttpReply MetricsText() const;

  const HttpServerOptions options_;
  const absl::Time started_;

  std::atomic<Engine*> engine_{nullptr};
  const std::shared_ptr<HttpGenerations> generations_;
  std::unique_ptr<HttpListener> listener_;
};

}  // namespace tpserve
