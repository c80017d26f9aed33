#include "coordinator/http_listener.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "coordinator/http_connection.h"

namespace tpserve {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

constexpr char kLog[] = "http";
// Accept failures (out of file descriptors, mostly) retry after this instead of spinning.
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);
// Refusals are logged at most once per this, with how many there were.
constexpr absl::Duration kRefusalLogInterval = absl::Seconds(5);

// HttpLimits::io_threads' default: a quarter of the cores, 2 to 4. Two even on a small machine:
// most of a token's delivery is the kernel's send, which then runs on two cores at once.
int DefaultIoThreads() {
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 2, 4);
}

}  // namespace

struct HttpListener::Impl {
  explicit Impl(int threads) : io(threads) {}

  net::io_context io;
  tcp::acceptor acceptor{io};
  net::steady_timer retry{io};
  std::shared_ptr<HttpConnection::Shared> shared = std::make_shared<HttpConnection::Shared>();
  std::vector<std::thread> threads;
  std::atomic<bool> stopped{false};

  absl::Mutex mutex;
  // Every connection that may still be open, for Stop (pruned as they end).
  std::vector<std::weak_ptr<HttpConnection>> connections ABSL_GUARDED_BY(mutex);

  // The accept handler's (one accept runs at a time).
  int64_t refused_since_log = 0;
  absl::Time last_refusal_log = absl::InfinitePast();

  void Accept();
  void OnAccepted(tcp::socket socket);
  void Remember(const std::shared_ptr<HttpConnection>& connection);
};

void HttpListener::Impl::Accept() {
  // Each connection runs on a strand of its own, so that its handlers never run at once while
  // different connections are served in parallel.
  acceptor.async_accept(net::make_strand(io),
                        [this](boost::system::error_code error, tcp::socket socket) {
                          if (error == net::error::operation_aborted || !acceptor.is_open()) return;
                          if (error) {
                            LogWarning(kLog, "accept failed: %s; retrying", error.message());
                            retry.expires_after(kAcceptRetry);
                            retry.async_wait([this](boost::system::error_code e) {
                              if (!e) Accept();
                            });
                            return;
                          }
                          OnAccepted(std::move(socket));
                          Accept();
                        });
}

void HttpListener::Impl::OnAccepted(tcp::socket socket) {
  const HttpLimits& limits = shared->limits;
  if (shared->open.load() < limits.max_connections) {
    Remember(HttpConnection::Start(std::move(socket), shared));
    return;
  }
  ++refused_since_log;
  if (absl::Now() - last_refusal_log >= kRefusalLogInterval) {
    LogWarning(kLog, "refused %d connections: %d are open, the limit", refused_since_log,
               limits.max_connections);
    refused_since_log = 0;
    last_refusal_log = absl::Now();
  }
  HttpReply refusal = shared->error_reply(
      503, absl::StrCat("too many connections: the server holds ", limits.max_connections,
                        " open connections, its limit"));
  refusal.headers.emplace_back("Retry-After", "1");
  Remember(HttpConnection::Start(std::move(socket), shared, std::move(refusal)));
}

void HttpListener::Impl::Remember(const std::shared_ptr<HttpConnection>& connection) {
  absl::MutexLock lock(&mutex);
  if (connections.size() >= 64 && connections.size() > 2 * static_cast<size_t>(shared->open)) {
    std::erase_if(connections, [](const std::weak_ptr<HttpConnection>& c) { return c.expired(); });
  }
  connections.push_back(connection);
}

HttpListener::HttpListener(HttpLimits limits, Admit admit, Dispatch dispatch,
                           ErrorReply error_reply)
    : impl_(
          std::make_unique<Impl>(limits.io_threads > 0 ? limits.io_threads : DefaultIoThreads())) {
  if (limits.io_threads <= 0) limits.io_threads = DefaultIoThreads();
  impl_->shared->limits = limits;
  impl_->shared->admit = std::move(admit);
  impl_->shared->dispatch = std::move(dispatch);
  impl_->shared->error_reply = std::move(error_reply);
}

HttpListener::~HttpListener() { Stop(); }

absl::StatusOr<int> HttpListener::Start(const std::string& host, int port) {
  boost::system::error_code error;
  tcp::resolver resolver(impl_->io);
  const auto endpoints = resolver.resolve(
      host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, error);
  if (error || endpoints.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve ", host, ": ", error ? error.message() : "no address"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor& acceptor = impl_->acceptor;
  if (acceptor.open(endpoint.protocol(), error) ||
      acceptor.set_option(tcp::acceptor::reuse_address(true), error) ||
      acceptor.bind(endpoint, error) ||
      acceptor.listen(net::socket_base::max_listen_connections, error)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", port, ": ", error.message()));
  }
  // Each connection is a file descriptor: warn when the limit cannot be reached.
  rlimit files{};
  const int max_connections = impl_->shared->limits.max_connections;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 &&
      files.rlim_cur < static_cast<rlim_t>(max_connections) + 256) {
    LogWarning(kLog,
               "the file descriptor limit (%d) is below %d connections + 256: raise ulimit -n",
               static_cast<int64_t>(files.rlim_cur), max_connections);
  }
  const int bound = acceptor.local_endpoint().port();
  impl_->Accept();
  for (int i = 0; i < impl_->shared->limits.io_threads; ++i) {
    impl_->threads.emplace_back([this] {
      NameThisThread("tp-http-io");
      impl_->io.run();
    });
  }
  return bound;
}

void HttpListener::BeginStop() { impl_->shared->stopping.store(true); }

void HttpListener::Stop() {
  BeginStop();
  if (impl_->stopped.exchange(true)) return;
  if (impl_->threads.empty()) return;
  net::post(impl_->io, [impl = impl_.get()] {
    boost::system::error_code ignored;
    impl->acceptor.close(ignored);
    impl->retry.cancel();
    std::vector<std::shared_ptr<HttpConnection>> open;
    {
      absl::MutexLock lock(&impl->mutex);
      for (const std::weak_ptr<HttpConnection>& weak : impl->connections) {
        if (std::shared_ptr<HttpConnection> connection = weak.lock()) open.push_back(connection);
      }
      impl->connections.clear();
    }
    for (const std::shared_ptr<HttpConnection>& connection : open) {
      connection->Post([connection] { connection->CloseNow(); });
    }
  });
  // The closes' aborted operations finish on the I/O threads; then nothing is left to run.
  for (std::thread& thread : impl_->threads) thread.join();
}

}  // namespace tpserve
