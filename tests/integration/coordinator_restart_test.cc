// SIGKILL the coordinator of a serving T=3 cluster and start a new one on the same address (as
// Kubernetes restarts the coordinator pod behind its Service): the workers notice the closed
// connection, register with the new coordinator (backing off, first retry within a second)
// keeping their loaded shards, and the cluster serves again within 5 s of the new coordinator's
// start, answering as it did before. With a connection that never closes (a lost host) they
// notice the silence (--coordinator-timeout) instead.
#include <signal.h>

#include <filesystem>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

// Kubernetes' readiness probes and a client's retry budget are counted in seconds.
constexpr absl::Duration kReadyAfterStart = absl::Seconds(5);

TEST(CoordinatorRestart, WorkersRegisterAgainAndTheClusterServes) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  auto serving = StartWithAnswer(options);
  ASSERT_TRUE(serving.ok()) << serving.status();
  LocalCluster& cluster = *serving->cluster;

  cluster.coordinator().Signal(SIGKILL);
  ASSERT_TRUE(cluster.coordinator().Wait(absl::Seconds(10)).has_value());
  // Down a while, as a rescheduled pod is: the workers' retries have backed off to their cap.
  absl::SleepFor(absl::Seconds(4));
  const absl::Time started = absl::Now();
  ASSERT_TRUE(cluster.RestartCoordinator().ok());
  ASSERT_TRUE(WaitForServing(cluster, kReadyAfterStart))
      << "not serving " << kReadyAfterStart << " after the new coordinator started\n"
      << LogTails(options);
  ExpectServesAgain(*serving, options, started, "coordinator_restart");
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_FALSE(cluster.worker(rank)->Poll().has_value()) << "worker " << rank << " exited";
  }
  cluster.StopAll();
  std::filesystem::remove_all(options.log_dir);
}

}  // namespace
}  // namespace tpserve::testing
