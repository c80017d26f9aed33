// A worker's Prometheus port: GET /metrics answers what `render` returns, in the text exposition
// format; anything else gets 404 or 400 and the connection closes. One connection at a time, on a
// thread of its own: a scrape is small and rare, and nothing a client sends can cost more than
// kMaxRequestBytes of memory or kReadTimeout of that thread. It changes nothing, so it asks for no
// credential (as the coordinator's /metrics).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tpserve {

class MetricsHttpServer {
 public:
  static constexpr size_t kMaxRequestBytes = 8 << 10;
  static constexpr absl::Duration kReadTimeout = absl::Seconds(2);

  // Listens on host:port (0: a free port) and serves until destroyed. UNAVAILABLE when the address
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& host, int port, std::function<std::string()> render);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer(int fd, int port, std::function<std::string()> render);
  void Loop();
  void Serve(int connection);

  const int listen_fd_;
  const int port_;
  const std::function<std::string()> render_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;  // started last
};

}  // namespace tpserve
