// GroupLoraTokens and TakeStepLoras (worker/lora_token_groups.h), which the CPU and the CUDA
// passes both run their LoRA products from.
#include "worker/lora_token_groups.h"

#include <memory>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

// Sequences of the given lengths and slots, one block each.
ForwardBatch Batch(const std::vector<int>& lengths, const std::vector<int32_t>& slots) {
  ForwardBatchBuilder builder(/*block_size=*/64);
  for (size_t s = 0; s < lengths.size(); ++s) {
    std::vector<int32_t> tokens(lengths[s], 5);
    builder.AddSequenceWithLogits(tokens, 0, {static_cast<int32_t>(s)}, 1, slots[s]);
  }
  return builder.Build();
}

std::vector<int32_t> Tokens(const LoraTokenGroup& g) {
  return std::vector<int32_t>(g.tokens, g.tokens + g.count);
}

TEST(GroupLoraTokens, GroupsEachSlotsTokensInBatchOrderUpToTheGroupSize) {
  // Tokens: seq 0 (slot 1) 0-2, seq 1 (base) 3-6, seq 2 (slot 2) 7, seq 3 (slot 1) 8-18.
  const ForwardBatch batch = Batch({3, 4, 1, 11}, {1, 0, 2, 1});
  const std::vector<LoraTokenGroup> groups = GroupLoraTokens(batch);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].slot, 1);
  EXPECT_EQ(Tokens(groups[0]), (std::vector<int32_t>{0, 1, 2, 8, 9, 10, 11, 12}));
  EXPECT_EQ(groups[1].slot, 2);
  EXPECT_EQ(Tokens(groups[1]), (std::vector<int32_t>{7}));
  EXPECT_EQ(groups[2].slot, 1);
  EXPECT_EQ(Tokens(groups[2]), (std::vector<int32_t>{13, 14, 15, 16, 17, 18}));
  // Every adapter token exactly once, no base token.
  std::vector<int> seen(batch.num_tokens(), 0);
  for (const LoraTokenGroup& g : groups) {
    EXPECT_LE(g.count, kMaxLoraGroupTokens);
    for (int32_t t : Tokens(g)) ++seen[t];
  }
  const std::vector<int> want = {1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(seen, want);
}

TEST(GroupLoraTokens, ABaseOnlyBatchHasNoGroups) {
  EXPECT_TRUE(GroupLoraTokens(Batch({4, 2}, {0, 0})).empty());
  EXPECT_TRUE(GroupLoraTokens(ForwardBatch{}).empty());
}

TEST(TakeStepLoras, EveryGroupOfASlotRunsTheShardLookedUpOnce) {
  LoraTable table(3);
  auto first = std::make_shared<const LoraShard>();
  auto second = std::make_shared<const LoraShard>();
  table.Set(1, first);
  table.Set(3, second);
  absl::StatusOr<StepLoras> step = TakeStepLoras(Batch({9, 2, 9}, {1, 3, 1}), &table);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->groups.size(), 4u);  // slot 1: 8 + 8 + 2 tokens; slot 3: 2
  ASSERT_EQ(step->shards.size(), 4u);
  for (size_t g = 0; g < 4; ++g) {
    EXPECT_EQ(step->shards[g], step->groups[g].slot == 1 ? first : second) << g;
  }
  // The step keeps its shards whatever the table does next.
  table.Set(1, nullptr);
  EXPECT_EQ(step->shards[0].use_count(), 4);  // `first`, and three groups

  const absl::Status empty = TakeStepLoras(Batch({2}, {2}), &table).status();
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("slot 2 holds no adapter"), std::string::npos) << empty;
  EXPECT_FALSE(TakeStepLoras(Batch({2}, {1}), nullptr).ok());
  EXPECT_TRUE(TakeStepLoras(Batch({2}, {0}), nullptr).ok());
}

}  // namespace
}  // namespace tpserve
