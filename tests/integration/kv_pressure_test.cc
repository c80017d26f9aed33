// A KV pool that holds about a quarter of the working set: 64 concurrent requests must all
// complete, through preemption and recompute, and at the end no request holds a block (every
// block is free or only cached). Runs SmolLM2 at T=1.
#include <future>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

constexpr int kRequests = 64;
constexpr int kBlockSize = 16;

TEST(KvPressure, SixtyFourRequestsCompleteInAQuarterOfTheirWorkingSet) {
  const std::vector<std::vector<int32_t>> golden = GoldenPromptIds();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;
  int64_t working_set_blocks = 0;
  for (int i = 0; i < kRequests; ++i) {
    const std::vector<int32_t>& g = golden[i % golden.size()];
    // Distinct prompts (a different token at the front), so the cache cannot share them.
    std::vector<int32_t> prompt = {static_cast<int32_t>(1000 + i)};
    prompt.insert(prompt.end(), g.begin(), g.begin() + std::min<size_t>(g.size(), 24 + i % 24));
    max_tokens.push_back(24 + (i * 5) % 24);
    working_set_blocks += (prompt.size() + max_tokens.back() + kBlockSize - 1) / kBlockSize;
    prompts.push_back(std::move(prompt));
  }
  const int64_t pool_blocks = working_set_blocks / 4;

  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 1);
  options.kv_cache_blocks = pool_blocks;
  auto cluster = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(cluster.ok()) << cluster.status();

  std::vector<std::future<absl::StatusOr<std::vector<int32_t>>>> pending;
  for (int i = 0; i < kRequests; ++i) {
    pending.push_back(std::async(std::launch::async, [&, i] {
      return GenerateGreedy(**cluster, prompts[i], max_tokens[i]);
    }));
  }
  for (int i = 0; i < kRequests; ++i) {
    auto tokens = pending[i].get();
    ASSERT_TRUE(tokens.ok()) << "request " << i << ": " << tokens.status() << "\n"
                             << LogTails(options);
    EXPECT_EQ(tokens->size(), static_cast<size_t>(max_tokens[i])) << "request " << i;
  }

  // The engine publishes its counts just after it answers the last request.
  absl::StatusOr<v1::ClusterStatusResponse> status;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  do {
    status = ClusterStatus(**cluster);
    ASSERT_TRUE(status.ok()) << status.status();
  } while (status->num_requests_running() > 0 && absl::Now() < deadline);
  std::printf(
      "kv_pressure: working set %lld blocks, pool %lld; %lld preemptions; at the end %lld blocks "
      "used, %lld cached\n",
      static_cast<long long>(working_set_blocks), static_cast<long long>(status->kv_blocks_total()),
      static_cast<long long>(status->num_preemptions()),
      static_cast<long long>(status->kv_blocks_used()),
      static_cast<long long>(status->kv_blocks_cached()));
  EXPECT_EQ(status->kv_blocks_total(), pool_blocks);
  EXPECT_GT(status->num_preemptions(), 0);
  EXPECT_EQ(status->kv_blocks_used(), 0);
  EXPECT_EQ(status->num_requests_running(), 0);
  EXPECT_EQ(status->num_requests_waiting(), 0);
}

}  // namespace
}  // namespace tpserve::testing
