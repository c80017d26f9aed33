// Continuous batching must not change what a request generates: 64 concurrent greedy requests of
// mixed prompt and output lengths on a T=3 SmolLM2 cluster (chunked prefill, decodes of many
// sequences per step, shared prefixes served from the prefix cache) give the text each request
// gives when it runs alone.
//
// The requests run alone one after the other on a T=1 cluster: on this test's two cores a T=3
// step costs ~60 all-reduces between three processes (~0.2 s), a T=1 step ~15 ms, and T=3
// computes what T=1 computes to 1e-4 (tp_equivalence_smollm2). So the reference is the plainest
// execution there is: one sequence, one process, no prefix cache.
//
// Batching and sharding change the shapes of the matrix products, and with them the float
// rounding, by ~1e-5..1e-4 in the logits. Where the top two logits are that close, greedy may
// pick either; such a divergence is accepted when, at the first differing token, the two top
// logits of the reference are within 1e-3. Each case is printed, and at most 2 of 64 may occur.
#include <algorithm>
#include <cstdio>
#include <future>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

constexpr int kRequests = 64;
constexpr float kNearTie = 1e-3f;

struct Request {
  std::vector<int32_t> prompt;
  int max_tokens = 0;
};

// Prompts of 4 to ~150 tokens cut from the golden texts; every fourth one shares a long prefix
// with another, so some run from the prefix cache.
std::vector<Request> MakeRequests() {
  const std::vector<std::vector<int32_t>> golden = GoldenPromptIds();
  std::vector<Request> requests;
  for (int i = 0; i < kRequests; ++i) {
    const std::vector<int32_t>& a = golden[i % golden.size()];
    const std::vector<int32_t>& b = golden[(i * 3 + 1) % golden.size()];
    Request r;
    const size_t len_a = std::max<size_t>(4, a.size() * ((i * 5) % 8 + 1) / 8);
    r.prompt.assign(a.begin(), a.begin() + std::min(len_a, a.size()));
    if (i % 4 == 3) r.prompt.insert(r.prompt.end(), b.begin(), b.begin() + b.size() / 2);
    r.max_tokens = 8 + (i * 7) % 33;
    requests.push_back(std::move(r));
  }
  return requests;
}

// The gap between the two largest values of `row`.
float TopTwoGap(const std::vector<float>& row) {
  std::vector<float> sorted = row;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  return sorted[0] - sorted[1];
}

TEST(BatchInvariance, SixtyFourConcurrentRequestsGenerateWhatEachGeneratesAlone) {
  const std::vector<Request> requests = MakeRequests();
  std::vector<std::vector<int32_t>> batched;
  {
    LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
    auto cluster = StartServing(options, absl::Seconds(120));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    std::vector<std::future<absl::StatusOr<std::vector<int32_t>>>> pending;
    for (const Request& r : requests) {
      pending.push_back(std::async(std::launch::async, [&cluster, &r] {
        return GenerateGreedy(**cluster, r.prompt, r.max_tokens);
      }));
    }
    for (auto& future : pending) {
      auto tokens = future.get();
      ASSERT_TRUE(tokens.ok()) << tokens.status() << "\n" << LogTails(options);
      batched.push_back(*std::move(tokens));
    }
    auto status = ClusterStatus(**cluster);
    ASSERT_TRUE(status.ok()) << status.status();
    std::printf("batch_invariance: T=3 batched run: %lld of %lld looked-up tokens were cached\n",
                static_cast<long long>(status->prefix_cache_hit_tokens()),
                static_cast<long long>(status->prefix_cache_query_tokens()));
  }

  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 1);
  options.coordinator_args = {"--no-prefix-cache"};
  auto cluster = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  int near_ties = 0;
  for (int i = 0; i < kRequests; ++i) {
    const Request& r = requests[i];
    auto alone = GenerateGreedy(**cluster, r.prompt, r.max_tokens);
    ASSERT_TRUE(alone.ok()) << alone.status() << "\n" << LogTails(options);
    ASSERT_EQ(alone->size(), static_cast<size_t>(r.max_tokens));
    ASSERT_EQ(batched[i].size(), static_cast<size_t>(r.max_tokens));
    const auto diff = std::mismatch(alone->begin(), alone->end(), batched[i].begin());
    if (diff.first == alone->end()) continue;
    const size_t k = diff.first - alone->begin();
    std::vector<int32_t> context = r.prompt;
    context.insert(context.end(), alone->begin(), alone->begin() + k);
    auto logits = Score(**cluster, context);
    ASSERT_TRUE(logits.ok()) << logits.status();
    const float gap = TopTwoGap(logits->back());
    std::printf(
        "batch_invariance: request %d (%zu prompt tokens) differs at output token %zu: alone %d, "
        "batched %d; top-2 logit gap alone %.2e\n",
        i, r.prompt.size(), k, *diff.first, *diff.second, gap);
    EXPECT_LE(gap, kNearTie) << "request " << i << " diverged without a near tie";
    ++near_ties;
  }
  std::printf("batch_invariance: %d of %d requests identical, %d near-tie divergences\n",
              kRequests - near_ties, kRequests, near_ties);
  EXPECT_LE(near_ties, 2);
}

}  // namespace
}  // namespace tpserve::testing
