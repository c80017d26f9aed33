// The HTTP front end's socket side: listens, accepts, enforces the connection limit, and runs
// every connection (http_connection.h) on its I/O threads (HttpLimits::io_threads), each
// connection on a strand of its own. Requests go to `dispatch` on an I/O thread, which must
// answer at once or hand the work elsewhere (the FrontEndPool).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/http_exchange.h"
#include "coordinator/http_message.h"

namespace tpserve {

class HttpListener {
 public:
  using Dispatch = std::function<void(std::shared_ptr<HttpExchange>, HttpRequest)>;
  using ErrorReply = std::function<HttpReply(int status, const std::string& message)>;
  // HttpConnection::Shared::admit: a reply refuses a request from its head alone.
  using Admit = std::function<std::optional<HttpReply>(const HttpRequest& head)>;

  HttpListener(HttpLimits limits, Admit admit, Dispatch dispatch, ErrorReply error_reply);
  ~HttpListener();  // Stop()

  // Listens on host:port (0: any free port) and starts the I/O threads; returns the port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  // From now on responses ask clients to close their connections.
  void BeginStop();
  // Stops accepting, closes every connection and joins the I/O threads. Exchanges still held
  // by handlers fail their writes from then on. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpserve
