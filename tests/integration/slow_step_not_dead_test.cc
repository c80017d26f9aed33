// Liveness comes from the heartbeats, not from how long a step takes:
// - a step with much work gets a deadline in proportion (a long prefill is not a dead rank),
// - a rank that stops answering (SIGSTOP: alive to the kernel, silent to everyone) is noticed by
//   the heartbeats, and the step waiting on it is abandoned at once: the requests in flight get
//   their error within a few heartbeat intervals (1 s each, 2 s to answer), not at the deadline.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

TEST(SlowStepNotDead, LongPrefillOutlivesASmallStepTimeout) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  options.coordinator_args = {"--step-timeout", "1"};
  auto cluster = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // ~2,000 tokens in one prefill step: 2-4 s at T=3 on two cores, past the 1 s step timeout.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 2000; ++i) prompt.push_back(300 + (i * 7919) % 20000);
  const auto started = std::chrono::steady_clock::now();
  auto tokens = GenerateGreedy(**cluster, prompt, 4);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_TRUE(tokens.ok()) << tokens.status() << "\n" << LogTails(options);
  std::printf("slow_step_not_dead: a 2,000-token prompt served in %.2f s with --step-timeout 1\n",
              seconds);
  EXPECT_EQ(tokens->size(), 4u);
  auto status = ClusterStatus(**cluster);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state(), v1::HealthResponse::STATE_SERVING) << status->DebugString();
}

TEST(SlowStepNotDead, StoppedRankFailsTheRequestsInFlightWithinHeartbeats) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  auto cluster = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<int32_t> prompt = {1, 504, 3458, 282, 5248, 314, 253, 1345};
  std::vector<std::future<absl::StatusOr<std::vector<int32_t>>>> pending;
  for (int i = 0; i < 4; ++i) {
    pending.push_back(std::async(std::launch::async, [&cluster, &prompt] {
      return GenerateGreedy(**cluster, prompt, 4000);
    }));
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the requests are decoding
  Subprocess* rank1 = (*cluster)->worker(1);
  ASSERT_NE(rank1, nullptr);
  ASSERT_EQ(kill(rank1->pid(), SIGSTOP), 0);
  const auto stopped = std::chrono::steady_clock::now();
  for (auto& future : pending) {
    const auto result = future.get();
    EXPECT_FALSE(result.ok()) << "a request finished although rank 1 is stopped";
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  std::printf("slow_step_not_dead: the 4 requests in flight failed %.2f s after SIGSTOP\n",
              seconds);
  EXPECT_LT(seconds, 6.0) << "the step was not abandoned (the step deadline is 30 s)";
  kill(rank1->pid(), SIGCONT);
}

}  // namespace
}  // namespace tpserve::testing
