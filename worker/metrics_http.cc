#include "worker/metrics_http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tpserve {
namespace {

// How often the accepting thread looks whether it should stop.
constexpr int kAcceptPollMs = 200;

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;  // the client left: nothing to tell anyone
    done += static_cast<size_t>(n);
  }
}

std::string Reply(const char* status, const char* content_type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, std::function<std::string()> render) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics port: cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  int error = fd < 0 ? errno : 0;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (error == 0 && (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 16) != 0)) {
    error = errno;
  }
  freeaddrinfo(found);
  if (error != 0) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("metrics port: cannot listen on ", host, ":", port, ": ", strerror(error)));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(fd, bound_port, std::move(render)));
}

MetricsHttpServer::MetricsHttpServer(int fd, int port, std::function<std::string()> render)
    : listen_fd_(fd), port_(port), render_(std::move(render)), thread_([this] { Loop(); }) {}

MetricsHttpServer::~MetricsHttpServer() {
  stopping_ = true;
  thread_.join();
  close(listen_fd_);
}

void MetricsHttpServer::Loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, kAcceptPollMs) <= 0) continue;
    const int connection = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    Serve(connection);
    close(connection);
  }
}

void MetricsHttpServer::Serve(int connection) {
  std::string request;
  const absl::Time deadline = absl::Now() + kReadTimeout;
  char buffer[1024];
  while (!absl::StrContains(request, "\r\n\r\n")) {
    if (request.size() >= kMaxRequestBytes) {
      WriteAll(connection,
               Reply("431 Request Header Fields Too Large", "text/plain", "request over 8 KiB\n"));
      return;
    }
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    pollfd p{connection, POLLIN, 0};
    if (left_ms <= 0 || poll(&p, 1, static_cast<int>(left_ms)) <= 0) return;  // too slow: drop
    const ssize_t n =
        recv(connection, buffer, std::min(sizeof(buffer), kMaxRequestBytes - request.size()), 0);
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  const std::string line = request.substr(0, request.find("\r\n"));
  if (absl::StartsWith(line, "GET /metrics ") || line == "GET /metrics") {
    WriteAll(connection, Reply("200 OK", "text/plain; version=0.0.4; charset=utf-8", render_()));
  } else if (absl::StartsWith(line, "GET ")) {
    WriteAll(connection, Reply("404 Not Found", "text/plain", "only /metrics is served here\n"));
  } else {
    WriteAll(connection, Reply("400 Bad Request", "text/plain", "GET /metrics only\n"));
  }
}

}  // namespace tpserve
