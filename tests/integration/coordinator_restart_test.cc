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
  auto serving = StartWithAnswer(options);
  ASSERT_TRUE(serving.ok()) << serving.status();
  LocalCluster& cluster = *serving->cluster;

  cluster.coordinator().Signal(SIGKILL);
  ASSERT_TRUE(cluster.coordinator().Wait(absl::Seconds(10)).has_value());
  ASSERT_TRUE(cluster.RestartCoordinator().ok());
  ExpectServesAgain(*serving, options, absl::Now(), "coordinator_restart");
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_FALSE(cluster.worker(rank)->Poll().has_value()) << "worker " << rank << " exited";
  }
  cluster.StopAll();
  std::filesystem::remove_all(options.log_dir);
}

}  // namespace
}  // namespace tpserve::testing
