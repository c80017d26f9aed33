// StepPlanner without a model: the all-or-nothing contract and the draft window, over steps
// written as text protos.
#include "worker/step_planner.h"

#include <string>

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
  StepPlanner planner(/*vocab_size=*/100, /*context_length=*/64, Pool(), /*rank=*/0);
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
  StepPlanner planner(100, 64, Pool(), 0);
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

}  // namespace
}  // namespace tpserve
