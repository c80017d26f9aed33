// Continuous batching must not change what a request generates: 64 concurrent greedy requests of
// mixed prompt and output lengths on a T=3 SmolLM2 cluster (chunked prefill, decodes of many
// sequences per step, shared prefixes served from the prefix cache) give, token for token, the
// text each request gives when it runs alone on a T=3 cluster without a prefix cache.
//
// Exact by construction, not by luck: the packed matrix product computes every output from its
// own row's operations only (packed_matmul.h), attention runs per sequence in a fixed order (a
// prompt in chunks gives the bits of the whole prompt: logits_match_llamacpp), and the CPU
// all-reduce adds the ranks' values in rank order whatever the message size. So no divergence is
// accepted, near-tie or not: one would mean a step's result depends on its batch.
#include <algorithm>
#include <cstdio>
#include <future>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

constexpr int kRequests = 64;

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

  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  options.coordinator_args = {"--no-prefix-cache"};
  auto cluster = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  int diverged = 0;
  for (int i = 0; i < kRequests; ++i) {
    const Request& r = requests[i];
    auto alone = GenerateGreedy(**cluster, r.prompt, r.max_tokens);
    ASSERT_TRUE(alone.ok()) << alone.status() << "\n" << LogTails(options);
    ASSERT_EQ(alone->size(), static_cast<size_t>(r.max_tokens));
    ASSERT_EQ(batched[i].size(), static_cast<size_t>(r.max_tokens));
    const auto diff = std::mismatch(alone->begin(), alone->end(), batched[i].begin());
    if (diff.first == alone->end()) continue;
    ADD_FAILURE() << "request " << i << " (" << r.prompt.size() << " prompt tokens) differs at "
                  << "output token " << diff.first - alone->begin() << ": alone " << *diff.first
                  << ", batched " << *diff.second;
    ++diverged;
  }
  std::printf("batch_invariance: %d of %d requests identical\n", kRequests - diverged, kRequests);
}

}  // namespace
}  // namespace tpserve::testing
