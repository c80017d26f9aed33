// A cluster set up wrong fails fast and says which rank and why; nothing hangs.
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

constexpr absl::Duration kLimit = absl::Seconds(30);

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Starts a cluster whose start-up must fail; returns the coordinator's output once it exits.
CommandResult ExpectStartupFailure(LocalClusterOptions options) {
  options.coordinator_args = {"--startup-timeout", "10"};
  CommandResult result;
  const absl::Time start = absl::Now();
  auto cluster = LocalCluster::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return result;
  const std::optional<int> status = (*cluster)->coordinator().Wait(kLimit);
  result.finished = status.has_value();
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (status.has_value()) result.wait_status = *status;
  result.output = LogTails(options, 40);
  EXPECT_TRUE(result.finished) << "the coordinator still runs after " << kLimit << "\n"
                               << result.output;
  EXPECT_TRUE(WIFEXITED(result.wait_status) && WEXITSTATUS(result.wait_status) != 0)
      << result.output;
  (*cluster)->StopAll();
  std::filesystem::remove_all(options.log_dir);
  return result;
}

TEST(ClusterMisconfig, ModelMissingOnOneWorker) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  options.worker_models[2] = "/nonexistent/SmolLM2.gguf";
  const CommandResult result = ExpectStartupFailure(options);
  EXPECT_TRUE(Contains(result.output, "rank 2")) << result.output;
  EXPECT_TRUE(Contains(result.output, "/nonexistent/SmolLM2.gguf")) << result.output;
}

TEST(ClusterMisconfig, DifferentModelFilesAcrossWorkers) {
  const std::string other = "/tmp/tpserve-other-" + std::to_string(getpid()) + ".gguf";
  std::filesystem::copy_file(TPSERVE_MODEL_PATH, other,
                             std::filesystem::copy_options::overwrite_existing);
  // Same size, different bytes inside the header: the fingerprint must tell them apart.
  {
    FILE* f = std::fopen(other.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 200, SEEK_SET);
    const int byte = std::fgetc(f);
    std::fseek(f, 200, SEEK_SET);
    std::fputc(byte ^ 0x01, f);
    std::fclose(f);
  }
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  options.worker_models[1] = other;
  const CommandResult result = ExpectStartupFailure(options);
  std::filesystem::remove(other);
  EXPECT_TRUE(Contains(result.output, "rank 1")) << result.output;
}

TEST(ClusterMisconfig, WorkerNeverComesUp) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  options.ranks = {0, 1};
  const CommandResult result = ExpectStartupFailure(options);
  EXPECT_TRUE(Contains(result.output, "2")) << result.output;
  EXPECT_LT(result.seconds, 30);
}

TEST(ClusterMisconfig, DuplicateRank) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  options.ranks = {0, 1, 1};
  options.coordinator_args = {"--startup-timeout", "10"};
  auto cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // One of the two rank-1 workers is refused and exits naming the rank.
  const absl::Time deadline = absl::Now() + kLimit;
  bool refused = false;
  while (!refused && absl::Now() < deadline) {
    const absl::Status alive = (*cluster)->CheckChildren();
    refused = !alive.ok() && Contains(std::string(alive.message()), "worker-1");
    absl::SleepFor(absl::Milliseconds(50));
  }
  const std::string logs = LogTails(options, 40);
  EXPECT_TRUE(refused) << logs;
  EXPECT_TRUE(Contains(logs, "rank 1")) << logs;
  // The coordinator still misses rank 2 and gives up within its start-up timeout.
  const std::optional<int> status = (*cluster)->coordinator().Wait(kLimit);
  EXPECT_TRUE(status.has_value()) << LogTails(options, 40);
  (*cluster)->StopAll();
  std::filesystem::remove_all(options.log_dir);
}

TEST(ClusterMisconfig, UnreachableCoordinator) {
  // A port that nothing listens on: bind one, note it, close it.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  close(fd);
  const CommandResult result = RunCommand(
      {std::string(TPSERVE_BIN_DIR) + "/tpserve-worker", "--coordinator", address, "--rank", "0",
       "--model", TPSERVE_MODEL_PATH, "--host", "127.0.0.1", "--register-timeout", "5"},
      kLimit);
  ASSERT_TRUE(result.finished) << result.output;
  EXPECT_TRUE(WIFEXITED(result.wait_status) && WEXITSTATUS(result.wait_status) != 0);
  EXPECT_TRUE(Contains(result.output, address)) << result.output;
  EXPECT_LT(result.seconds, 30);
}

}  // namespace
}  // namespace tpserve::testing
