// A T=3 cluster (three worker processes, Gloo all-reduce over 127.0.0.1) computes what a T=1
// cluster computes on SmolLM2: teacher-forced logits within 1e-3 and identical greedy text.
#include <cmath>
#include <cstdio>
#include <future>

#include "gtest/gtest.h"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

constexpr int kContinuation = 64;

struct ClusterOutputs {
  std::vector<std::vector<std::vector<float>>> logits;  // [prompt][position][vocab]
  std::vector<std::vector<int32_t>> continuations;      // [prompt][kContinuation]
};

ClusterOutputs RunCluster(int world_size, const std::vector<std::vector<int32_t>>& prompts) {
  ClusterOutputs out;
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, world_size);
  auto cluster = StartServing(options, absl::Seconds(120));
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return out;
  for (const auto& ids : prompts) {
    auto logits = Score(**cluster, ids);
    EXPECT_TRUE(logits.ok()) << logits.status() << "\n" << LogTails(options);
    if (logits.ok()) out.logits.push_back(*std::move(logits));
  }
  // All prompts at once, so the engine decodes them as one batch.
  std::vector<std::future<absl::StatusOr<std::vector<int32_t>>>> pending;
  for (const auto& ids : prompts) {
    pending.push_back(std::async(std::launch::async, [&cluster, &ids] {
      return GenerateGreedy(**cluster, ids, kContinuation);
    }));
  }
  for (auto& future : pending) {
    auto tokens = future.get();
    EXPECT_TRUE(tokens.ok()) << tokens.status() << "\n" << LogTails(options);
    if (tokens.ok()) out.continuations.push_back(*std::move(tokens));
  }
  return out;
}

TEST(TpEquivalenceSmolLM2, ThreeRanksMatchOne) {
  const std::vector<std::vector<int32_t>> prompts = GoldenPromptIds();
  ASSERT_GE(prompts.size(), 8u);
  const ClusterOutputs one = RunCluster(1, prompts);
  const ClusterOutputs three = RunCluster(3, prompts);
  ASSERT_EQ(one.logits.size(), prompts.size());
  ASSERT_EQ(three.logits.size(), prompts.size());
  double max_diff = 0;
  int64_t positions = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    ASSERT_EQ(one.logits[p].size(), prompts[p].size());
    ASSERT_EQ(three.logits[p].size(), prompts[p].size());
    for (size_t i = 0; i < prompts[p].size(); ++i) {
      ASSERT_EQ(one.logits[p][i].size(), three.logits[p][i].size());
      for (size_t v = 0; v < one.logits[p][i].size(); ++v) {
        max_diff = std::max<double>(max_diff, std::fabs(one.logits[p][i][v] - three.logits[p][i][v]));
      }
      ++positions;
    }
  }
  std::printf("tp_equivalence_smollm2: %lld positions, max |logit(T=3) - logit(T=1)| = %.3e\n",
              static_cast<long long>(positions), max_diff);
  EXPECT_LE(max_diff, 1e-3);

  ASSERT_EQ(one.continuations.size(), prompts.size());
  ASSERT_EQ(three.continuations.size(), prompts.size());
  for (size_t p = 0; p < prompts.size(); ++p) {
    EXPECT_EQ(one.continuations[p].size(), static_cast<size_t>(kContinuation));
    EXPECT_EQ(one.continuations[p], three.continuations[p]) << "prompt " << p;
  }
}

}  // namespace
}  // namespace tpserve::testing
