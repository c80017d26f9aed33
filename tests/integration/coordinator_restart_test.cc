// SIGKILL the coordinator of a serving T=3 cluster and start a new one on the same address (as
// Kubernetes restarts the coordinator pod behind its Service): the workers notice the silence
// (--coordinator-timeout), register with the new coordinator keeping their loaded shards, and
// the cluster serves again, answering as it did before.
#include <signal.h>

#include <filesystem>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

constexpr int kCoordinatorTimeoutS = 3;

TEST(CoordinatorRestart, WorkersRegisterAgainAndTheClusterServes) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  options.worker_args = {"--coordinator-timeout", std::to_string(kCoordinatorTimeoutS)};
  auto started = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  const std::vector<int32_t> prompt = GoldenPromptIds().front();
  const auto before = GenerateGreedy(cluster, prompt, 8);
  ASSERT_TRUE(before.ok()) << before.status();

  cluster.coordinator().Signal(SIGKILL);
  ASSERT_TRUE(cluster.coordinator().Wait(absl::Seconds(10)).has_value());
  ASSERT_TRUE(cluster.RestartCoordinator().ok());
  ExpectServesAgain(cluster, options, absl::Now(), prompt, *before, "coordinator_restart");
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_FALSE(cluster.worker(rank)->Poll().has_value()) << "worker " << rank << " exited";
  }
  cluster.StopAll();
  std::filesystem::remove_all(options.log_dir);
}

}  // namespace
}  // namespace tpserve::testing
