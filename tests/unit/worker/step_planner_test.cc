// StepPlanner without a model: the all-or-nothing contract and the draft window, over steps
// written as text protos.
#include "worker/step_planner.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

v1::StepRequest Step(const std::string& text) {
  v1::StepRequest request;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &request)) << text;
  return request;
}

KvCacheShape Pool() {
  KvCacheShape kv;
  kv.num_blocks = 4;
  kv.block_size = 16;
  return kv;
}

TEST(StepPlannerTest, RefusedStepAddsNoSequence) {
  StepPlanner planner(/*vocab_size=*/100, /*context_length=*/64, Pool(), /*samples=*/true);
  const v1::StepRequest bad = Step(
      "new_sequences { seq_id: 1 sampling { temperature: 0 top_p: 1 repetition_penalty: 1 } "
      "prompt_token_ids: [1, 2] }"
      " sequences { seq_id: 1 token_ids: [1, 2] new_block_ids: [9] sample: true }");
  const absl::StatusOr<StepPlanner::Plan> plan = planner.Begin(bad);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("new_block_ids[0] = 9"), std::string::npos)
      << plan.status();
  EXPECT_EQ(planner.num_sequences(), 0u);
}

TEST(StepPlannerTest, NextStartMustFallInsideTheLastStepsDrafts) {
  StepPlanner planner(100, 64, Pool(), true);
  const v1::StepRequest first = Step(
      "new_sequences { seq_id: 1 sampling { temperature: 0 top_p: 1 repetition_penalty: 1 } "
      "prompt_token_ids: [1, 2] }"
      " sequences { seq_id: 1 token_ids: [1, 2] new_block_ids: [0] sample: true }");
  absl::StatusOr<StepPlanner::Plan> plan = planner.Begin(first);
  ASSERT_TRUE(plan.ok()) << plan.status();
  planner.Commit(first, *plan);
  const v1::StepRequest drafts = Step(
      "sequences { seq_id: 1 token_ids: [3] start_position: 2 draft_token_ids: [4, 5]"
      " sample: true }");
  plan = planner.Begin(drafts);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->batch.num_logits(), 3);
  planner.Commit(drafts, *plan);
  // Positions 3 and 4 hold the drafts: the next step starts at 3, 4 or 5, not before.
  EXPECT_FALSE(
      planner.Begin(Step("sequences { seq_id: 1 token_ids: [6] start_position: 2 }")).ok());
  EXPECT_TRUE(planner.Begin(Step("sequences { seq_id: 1 token_ids: [6] start_position: 4 }")).ok());
}

// Blocks that held only rejected drafts were freed by the coordinator: the table is cut to
// kept_blocks before new_block_ids are appended, never below the positions before the start.
TEST(StepPlannerTest, KeptBlocksCutTheTableBeforeNewBlocks) {
  StepPlanner planner(100, 64, Pool(), true);
  const v1::StepRequest first = Step(
      "new_sequences { seq_id: 1 sampling { temperature: 0 top_p: 1 repetition_penalty: 1 } "
      "prompt_token_ids: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] }"
      " sequences { seq_id: 1 token_ids: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]"
      " new_block_ids: [0] sample: true }");
  absl::StatusOr<StepPlanner::Plan> plan = planner.Begin(first);
  ASSERT_TRUE(plan.ok()) << plan.status();
  planner.Commit(first, *plan);
  // Position 15 and drafts at 16..18: block 2 joins the table.
  const v1::StepRequest drafts = Step(
      "sequences { seq_id: 1 token_ids: [16] start_position: 15 draft_token_ids: [4, 5, 6]"
      " new_block_ids: [2] sample: true }");
  plan = planner.Begin(drafts);
  ASSERT_TRUE(plan.ok()) << plan.status();
  planner.Commit(drafts, *plan);
  // All drafts rejected: the coordinator freed block 2, and the next step, from position 16,
  // runs in block 3.
  plan =
      planner.Begin(Step("sequences { seq_id: 1 token_ids: [17] start_position: 16 kept_blocks: 1"
                         " new_block_ids: [3] }"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->block_tables.front(), (std::vector<int32_t>{0, 3}));
  for (const char* bad : {"kept_blocks: 3", "kept_blocks: -1"}) {
    const absl::StatusOr<StepPlanner::Plan> refused =
        planner.Begin(Step(absl::StrCat("sequences { seq_id: 1 token_ids: [17] start_position: 16 ",
                                        bad, " new_block_ids: [3] }")));
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("kept_blocks"), std::string::npos)
        << refused.status();
  }
  // Position 16 is computed: a table of no block cannot hold it.
  EXPECT_FALSE(planner
                   .Begin(Step("sequences { seq_id: 1 token_ids: [17] start_position: 16 "
                               "kept_blocks: 0 new_block_ids: [3, 1] }"))
                   .ok());
}

}  // namespace
}  // namespace tpserve
