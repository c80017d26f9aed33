// The coordinator's HTTP front end (cpp-httplib): the OpenAI-compatible API over the engine,
// health checks and Prometheus metrics.
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
// starting". Errors are OpenAI error bodies
// (openai_error.h); 429 carries `Retry-After: 1`. Every response to an accepted request carries
// `X-Request-Id`, the engine's request id; one log line per request names it.
//
// Cancellation: a streaming client that goes away cancels its samples at the next chunk written
// after it left. A non-streaming client that goes away is not noticed (cpp-httplib 0.11 does not
// expose the connection to a handler), so its request runs to max_tokens.
//
// Threads: cpp-httplib's accept loop runs on a thread of its own; requests run on a pool of
// kHttpThreads, each streaming request holding one thread until it ends. The process ignores
// SIGPIPE (httplib::Server's constructor sets that), so a client that disconnects mid-write is a
// failed write, not a signal.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/engine.h"
#include "coordinator/bearer_keys.h"
#include "coordinator/metrics.h"
#include "coordinator/openai_request.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tpserve {

// Concurrent HTTP requests served at once (streaming ones hold their thread); more wait for one.
inline constexpr int kHttpThreads = 64;

struct HttpServerOptions {
  std::string model_name;  // what clients pass as "model" and /v1/models lists
  // Listed by /v1/models until the engine runs; after that the engine's is used.
  int64_t context_length = 0;
  // Not owned; must outlive the server. `chat_template` may be null (chat requests get 400).
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
  Metrics* metrics = nullptr;
  // /v1/* need one of these keys (none: open); health and metrics stay open.
  const BearerKeys* api_keys = nullptr;
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();  // Stop()

  // Listens on host:port (0: any free port) and serves on its own threads; returns the port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  // Ends every request in flight (streams are cancelled; waiting clients get 503) and joins the
  // threads. Idempotent.
  void Stop();

  // From now on /v1/* go to `engine`, which must outlive the server (or Stop() first).
  void SetEngine(Engine* engine) { engine_.store(engine); }

 private:
  void HandleGenerate(OpenAiEndpoint endpoint, const httplib::Request& request,
                      httplib::Response& response);
  void HandleModels(httplib::Response& response) const;
  void HandleHealth(httplib::Response& response) const;
  void HandleReady(httplib::Response& response) const;
  void HandleMetrics(httplib::Response& response) const;

  const HttpServerOptions options_;
  const absl::Time started_;

  std::atomic<Engine*> engine_{nullptr};
  std::atomic<bool> stopping_{false};  // read by request threads waiting on the engine
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;  // runs the accept loop
  std::atomic<bool> accept_loop_ended_{false};
};

}  // namespace tpserve
