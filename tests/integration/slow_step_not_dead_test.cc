// Liveness comes from the heartbeats, not from how long a step takes:
// - a long prompt runs as many steps of bounded attention work (--max-step-attention), each with
//   a deadline in proportion to its work, so it is served with a small --step-timeout, and a
//   stream that is decoding meanwhile keeps getting tokens;
// - a rank that stops answering (SIGSTOP: alive to the kernel, silent to everyone) misses a
//   heartbeat, and the step waiting on it is abandoned at once: the requests in flight get their
//   error within 2 heartbeat intervals of the stop, not at the step deadline.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A greedy generation streamed on its own thread, keeping when each token arrived.
class TimedStream {
 public:
  TimedStream(LocalCluster& cluster, const std::vector<int32_t>& prompt, int max_tokens)
      : thread_([this, &cluster, prompt, max_tokens] { Run(cluster, prompt, max_tokens); }) {}
  ~TimedStream() { thread_.join(); }

  int TokensBetween(Clock::time_point from, Clock::time_point to) {
    absl::MutexLock lock(&mutex_);
    int n = 0;
    for (Clock::time_point t : arrivals_) n += t >= from && t <= to;
    return n;
  }
  int tokens() {
    absl::MutexLock lock(&mutex_);
    return static_cast<int>(arrivals_.size());
  }

 private:
  void Run(LocalCluster& cluster, const std::vector<int32_t>& prompt, int max_tokens) {
    const v1::GenerateRequest request = GreedyRequest(prompt, max_tokens);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
    auto reader = cluster.inference().Generate(&context, request);
    v1::GenerateResponse chunk;
    while (reader->Read(&chunk)) {
      absl::MutexLock lock(&mutex_);
      for (int i = 0; i < chunk.token_ids_size(); ++i) arrivals_.push_back(Clock::now());
    }
    reader->Finish();
  }

  absl::Mutex mutex_;
  std::vector<Clock::time_point> arrivals_ ABSL_GUARDED_BY(mutex_);
  std::thread thread_;
};

TEST(SlowStepNotDead, LongPromptRunsAsShortStepsWhileADecodeKeepsStreaming) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  // A 2,000-token prefill in one step takes 2-4 s at T=3 on two cores, past the 1 s step
  // timeout; 512² of attention work per step makes it about a dozen steps instead.
  options.coordinator_args = {"--step-timeout", "1", "--max-step-attention", "262144"};
  auto cluster = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  TimedStream decode(**cluster, {1, 504, 3458, 282, 5248, 314, 253, 1345}, 400);
  const auto waited = Clock::now();
  while (decode.tokens() < 3 && SecondsSince(waited) < 60) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(decode.tokens(), 3) << LogTails(options);

  std::vector<int32_t> prompt;
  for (int i = 0; i < 2000; ++i) prompt.push_back(300 + (i * 7919) % 20000);
  const auto started = Clock::now();
  auto tokens = GenerateGreedy(**cluster, prompt, 1);
  const auto finished = Clock::now();
  ASSERT_TRUE(tokens.ok()) << tokens.status() << "\n" << LogTails(options);
  EXPECT_EQ(tokens->size(), 1u);
  const int decoded = decode.TokensBetween(started, finished);
  std::printf(
      "slow_step_not_dead: a 2,000-token prompt served in %.2f s with --step-timeout 1; the "
      "decode beside it got %d tokens meanwhile\n",
      std::chrono::duration<double>(finished - started).count(), decoded);
  // One token per step of the long prompt, which takes about a dozen steps.
  EXPECT_GE(decoded, 6) << "the decode stalled behind the long prefill";
  auto status = ClusterStatus(**cluster);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state(), v1::HealthResponse::STATE_SERVING) << status->DebugString();
}

TEST(SlowStepNotDead, StoppedRankFailsTheRequestsInFlightWithinTwoHeartbeatIntervals) {
  constexpr double kHeartbeatIntervalS = 1.0;
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  // Not held for the rank to answer again: the failure shows when the rank was found silent.
  options.coordinator_args = {"--heartbeat-interval", std::to_string(kHeartbeatIntervalS),
                              "--recovery-grace", "0"};
  auto cluster = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<int32_t> prompt = {1, 504, 3458, 282, 5248, 314, 253, 1345};
  std::vector<std::future<absl::StatusOr<std::vector<int32_t>>>> pending;
  std::vector<Clock::time_point> ended(4);
  for (int i = 0; i < 4; ++i) {
    pending.push_back(std::async(std::launch::async, [&cluster, &prompt, &ended, i] {
      auto result = GenerateGreedy(**cluster, prompt, 4000);
      ended[i] = Clock::now();
      return result;
    }));
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the requests are decoding
  Subprocess* rank1 = (*cluster)->worker(1);
  ASSERT_NE(rank1, nullptr);
  ASSERT_EQ(kill(rank1->pid(), SIGSTOP), 0);
  const auto stopped = Clock::now();
  double slowest = 0;
  for (int i = 0; i < 4; ++i) {
    const auto result = pending[i].get();
    EXPECT_FALSE(result.ok()) << "a request finished although rank 1 is stopped";
    slowest = std::max(slowest, std::chrono::duration<double>(ended[i] - stopped).count());
  }
  std::printf(
      "slow_step_not_dead: the 4 requests in flight failed at most %.2f s after SIGSTOP "
      "(heartbeat interval %.1f s)\n",
      slowest, kHeartbeatIntervalS);
  EXPECT_LT(slowest, 2 * kHeartbeatIntervalS) << LogTails(options);
  kill(rank1->pid(), SIGCONT);
}

}  // namespace
}  // namespace tpserve::testing
