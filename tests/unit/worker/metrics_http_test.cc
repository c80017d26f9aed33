// The worker's metrics port over real sockets on 127.0.0.1: GET /metrics answers the rendered
// text, other paths 404, other methods 400, an oversized request 431, and a client that sends
// nothing does not keep the next one from being served.
#include "worker/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/worker_metrics.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

// Sends `request` on a new connection and reads until the server closes it.
std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string reply;
  char buffer[4096];
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) reply.append(buffer, n);
  close(fd);
  return reply;
}

TEST(MetricsHttpServer, ServesMetricsAndRefusesTheRest) {
  auto server = MetricsHttpServer::Start("127.0.0.1", 0, [] { return std::string("x 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  const std::string ok = Exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(ok, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(ok, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(ok, HasSubstr("\r\n\r\nx 1\n"));
  EXPECT_THAT(Exchange(port, "GET /secrets HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(Exchange(port, "POST /metrics HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(Exchange(port, "GET /metrics HTTP/1.1\r\nX: " + std::string(9000, 'a')),
              StartsWith("HTTP/1.1 431"));
}

TEST(MetricsHttpServer, ASilentClientTimesOutAndTheNextIsServed) {
  auto server = MetricsHttpServer::Start("127.0.0.1", 0, [] { return std::string("y 2\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  const int silent = Connect((*server)->port());
  const std::string reply = Exchange((*server)->port(), "GET /metrics HTTP/1.0\r\n\r\n");
  EXPECT_THAT(reply, HasSubstr("y 2\n"));
  close(silent);
}

TEST(MetricsHttpServer, APortInUseIsAnError) {
  auto first = MetricsHttpServer::Start("127.0.0.1", 0, [] { return std::string(); });
  ASSERT_TRUE(first.ok());
  auto second =
      MetricsHttpServer::Start("127.0.0.1", (*first)->port(), [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("cannot listen"));
}

TEST(WorkerMetrics, RendersEveryFamilyWithTheRank) {
  WorkerMetricsSnapshot snapshot;
  snapshot.rank = 3;
  snapshot.state = "serving";
  snapshot.kv_cache_blocks = 512;
  snapshot.weight_bytes = 1000;
  snapshot.steps.Observe(0.004);
  snapshot.steps.Observe(0.2);
  snapshot.collectives = 60;
  snapshot.collective_seconds = 0.5;
  const std::string text = RenderWorkerMetrics(snapshot);
  for (const char* line :
       {"tpserve_worker:step_duration_seconds_bucket{rank=\"3\",le=\"0.0025\"} 0",
        "tpserve_worker:step_duration_seconds_bucket{rank=\"3\",le=\"0.005\"} 1",
        "tpserve_worker:step_duration_seconds_bucket{rank=\"3\",le=\"+Inf\"} 2",
        "tpserve_worker:step_duration_seconds_count{rank=\"3\"} 2",
        "tpserve_worker:collective_seconds_total{rank=\"3\"} 0.5",
        "tpserve_worker:collectives_total{rank=\"3\"} 60",
        "tpserve_worker:kv_cache_blocks{rank=\"3\"} 512",
        "tpserve_worker:weight_bytes{rank=\"3\"} 1000",
        "tpserve_worker:state{rank=\"3\",state=\"serving\"} 1"}) {
    EXPECT_THAT(text, HasSubstr(std::string(line) + "\n"));
  }
}

}  // namespace
}  // namespace tpserve
