// The HTTP front end's socket side: listens, accepts, enforces the connection limit, and runs
// every connection (http_connection.h) on one I/O thread of its own. Requests go to `dispatch`
// on that thread, which must answer at once or hand the exchange to a thread of its own.
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

  // Listens on host:port (0: any free port) and starts the I/O thread; returns the port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  // From now on responses ask clients to close their connections.
  void BeginStop();
  // Stops accepting, closes every connection and joins the I/O thread. Exchanges still held
  // by handlers fail their writes from then on. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpserve
