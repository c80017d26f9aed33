// The engine's failure model (engine.h): failed and missed steps degrade the cluster, held
// requests resume exactly when the group re-forms or fail past the grace; and steps in flight
// (pipeline stages), which overlap and are held together when one fails.
#include <string>
#include <thread>
#include <vector>

#include "coordinator/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/coordinator/engine_fixture.h"

namespace tpserve::testing {
namespace {

using ::testing::HasSubstr;

TEST_F(EngineTest, FailedStepDegradesTheCluster) {
  FakeWorkerOptions failing;
  failing.fail_at_step = 3;
  Start({{}, {}, failing});
  Generated out = Generate(Request({300, 301}, 10));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(out.status.error_message(), HasSubstr("rank 2"));
  EXPECT_THAT(out.status.error_message(), HasSubstr("injected failure"));
  EXPECT_THAT(out.status.error_message(), ::testing::Not(HasSubstr("rank 0")));

  grpc::ClientContext context;
  v1::HealthResponse health;
  ASSERT_TRUE(stub_->Health(&context, v1::HealthRequest(), &health).ok());
  EXPECT_EQ(health.state(), v1::HealthResponse::STATE_DEGRADED);
  EXPECT_THAT(health.message(), HasSubstr("rank 2"));

  Generated refused = Generate(Request({300}, 1));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("cluster degraded: "));
}

// Within the recovery grace a failed step holds the requests in flight: when the group re-forms
// they recompute on the emptied workers (which check every cached prefix and position) and go
// on, each stream exactly the continuation it would have been without the failure.
TEST_F(EngineTest, HeldRequestsResumeWhereTheyStoppedWhenTheGroupReforms) {
  EngineOptions options;
  options.max_queued_requests = 5;
  StartWithRank2FailingAt(6, absl::Seconds(60), options);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back({200 + i, 210 + i, 220, 230, 240 + i});
  std::vector<Generated> outs(prompts.size() + 1);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] { outs[i] = Generate(Request(prompts[i], 12)); });
  }
  AwaitHeld(3);
  const absl::Status health = engine_->health();
  EXPECT_EQ(health.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(health.message(), HasSubstr("rank 2"));
  EXPECT_THAT(health.message(), HasSubstr("held"));
  const std::optional<Engine::Pause> pause = engine_->pause();
  ASSERT_TRUE(pause.has_value());
  EXPECT_GT(pause->grace_left, absl::Seconds(50));
  EXPECT_EQ(engine_->stats().blocks_used(), 0);  // their KV is gone with the group

  // A new request queues behind them (max_queued_requests allows it) and waits too.
  const std::vector<int32_t> late = {250, 251, 252};
  clients.emplace_back([&] { outs.back() = Generate(Request(late, 6)); });
  AwaitHeld(4);
  rank_back_ = true;
  for (auto& client : clients) client.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << i << ": " << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, Expected(prompts[i], 12)) << i;
  }
  ASSERT_TRUE(outs.back().status.ok()) << outs.back().status.error_message();
  EXPECT_EQ(outs.back().tokens, Expected(late, 6));
  EXPECT_TRUE(engine_->health().ok());
  EXPECT_FALSE(engine_->pause().has_value());
  const EngineStats stats = engine_->stats();
  EXPECT_EQ(stats.recovery.requests_held, 4);
  EXPECT_EQ(stats.recovery.requests_resumed, 4);
  EXPECT_EQ(stats.recovery.recoveries, 1);
  EXPECT_EQ(stats.num_held, 0);
  EXPECT_EQ(stats.blocks_used(), 0);
  EXPECT_EQ(stats.counters.num_preemptions, 0);  // held, not preempted
  ExpectConsistentSteps();
}

// Without a queue limit new requests are refused while requests are held; past the grace the
// held ones fail naming the rank, and the cluster serves once the group re-forms.
TEST_F(EngineTest, HeldRequestsFailPastTheGraceNamingTheRank) {
  StartWithRank2FailingAt(3, absl::Milliseconds(1500));
  Generated held;
  std::thread client([&] { held = Generate(Request({300, 301}, 10)); });
  AwaitHeld(1);
  const Generated refused = Generate(Request({302}, 2));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("held"));
  clock_.Advance(absl::Milliseconds(1500));  // the grace is over
  client.join();
  EXPECT_EQ(held.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(held.status.error_message(), HasSubstr("rank 2"));
  EXPECT_THAT(held.status.error_message(), HasSubstr("recovery grace"));
  EXPECT_FALSE(engine_->pause().has_value());
  EXPECT_EQ(engine_->stats().recovery.requests_resumed, 0);

  rank_back_ = true;
  ASSERT_TRUE(engine_->AwaitServing(absl::Now() + absl::Seconds(10)));
  const Generated served = Generate(Request({300, 301}, 4));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.tokens, Expected({300, 301}, 4));
  EXPECT_EQ(engine_->stats().blocks_used(), 0);
}

// A request that fails every step it runs in is held max_request_holds times, then fails naming
// the failures; the cluster serves the next request.
TEST_F(EngineTest, ARequestWhoseStepsAlwaysFailIsNotHeldForEver) {
  FakeWorkerOptions poisoned;
  poisoned.poison_token = 666;
  rank_back_ = true;
  ReformWhenTheRankIsBack();
  EngineOptions options;
  options.recovery_grace = absl::Seconds(60);
  options.max_request_holds = 2;
  Start({{}, {}, poisoned}, options);
  const absl::Time start = absl::Now();
  const Generated poison = Generate(Request({300, 666, 301}, 5));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(poison.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(poison.status.error_message(), HasSubstr("failed 3 times"));
  EXPECT_THAT(poison.status.error_message(), HasSubstr("rank 2"));
  EXPECT_THAT(poison.status.error_message(), HasSubstr("injected failure"));
  ASSERT_TRUE(engine_->AwaitServing(absl::Now() + absl::Seconds(10)));
  const Generated served = Generate(Request({300, 301}, 4));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.tokens, Expected({300, 301}, 4));
  const EngineStats stats = engine_->stats();
  EXPECT_EQ(stats.recovery.requests_held, 2);  // the third failure fails it
  EXPECT_EQ(stats.recovery.requests_resumed, 2);
  EXPECT_EQ(stats.recovery.recoveries, 3);
  EXPECT_EQ(stats.blocks_used(), 0);
}

// A re-formation attempt that succeeds only after the grace has run out: the requests held
// meanwhile fail as past the grace (they do not resume), the pause is reported until then, and a
// new request is served.
TEST_F(EngineTest, AReformationFinishingPastTheGraceFailsWhatItHeld) {
  absl::Notification attempt_started;
  absl::Notification attempt_may_end;
  reform_ = [&]() -> absl::Status {
    if (!attempt_started.HasBeenNotified()) attempt_started.Notify();
    attempt_may_end.WaitForNotification();
    WorkerInitOptions init;
    init.group_id = "test-reformed";
    init.block_size = block_size_;
    return pool_->Init(init, absl::Seconds(5));
  };
  FakeWorkerOptions failing;
  failing.fail_at_step = 3;
  EngineOptions options;
  options.recovery_grace = absl::Seconds(5);
  Start({{}, {}, failing}, options);
  Generated held;
  std::thread client([&] { held = Generate(Request({300, 301}, 10)); });
  ASSERT_TRUE(attempt_started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  clock_.Advance(absl::Seconds(6));  // past the grace, the attempt still running
  const std::optional<Engine::Pause> pause = engine_->pause();
  attempt_may_end.Notify();
  ASSERT_TRUE(pause.has_value());
  EXPECT_EQ(pause->grace_left, absl::ZeroDuration());
  client.join();
  EXPECT_EQ(held.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(held.status.error_message(), HasSubstr("rank 2"));
  EXPECT_THAT(held.status.error_message(), HasSubstr("recovery grace"));
  EXPECT_EQ(engine_->stats().recovery.requests_resumed, 0);
  EXPECT_TRUE(engine_->health().ok());
  EXPECT_FALSE(engine_->pause().has_value());
  const Generated served = Generate(Request({300, 301}, 4));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.tokens, Expected({300, 301}, 4));
}

// A client's deadline ends its call while the request is held, and the engine lets it go.
TEST_F(EngineTest, ClientDeadlineEndsAHeldRequest) {
  StartWithRank2FailingAt(3, absl::Seconds(60));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  auto reader = stub_->Generate(&context, Request({300, 301}, 10));
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  AwaitHeld(0);
  EXPECT_EQ(engine_->stats().num_waiting, 0);
  EXPECT_TRUE(engine_->pause().has_value());  // still paused, holding nothing
}

TEST_F(EngineTest, MissedStepDeadlineNamesTheRank) {
  FakeWorkerOptions hanging;
  hanging.hang_at_step = 2;
  EngineOptions options;
  options.step_timeout = absl::Milliseconds(500);
  Start({{}, hanging, {}}, options);
  const absl::Time start = absl::Now();
  Generated out = Generate(Request({300, 301}, 10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(out.status.error_message(), HasSubstr("rank 1"));
  EXPECT_THAT(out.status.error_message(), HasSubstr("no answer within 500ms"));
}

TEST_F(EngineTest, TwoStepsInFlightOverlapAndEveryStreamIsExact) {
  FakeWorkerOptions slow;
  slow.step_delay = absl::Milliseconds(20);
  EngineOptions options;
  options.steps_in_flight = 2;
  Start({slow, slow}, options);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back({300 + i, 310, 320 + i, 330, 340, 350 + i});
  std::vector<Generated> outs(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] { outs[i] = Generate(Request(prompts[i], 10)); });
  }
  for (auto& client : clients) client.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << i << ": " << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, Expected(prompts[i], 10)) << i;
  }
  for (const auto& fake : fakes_) EXPECT_EQ(fake->max_steps_at_once(), 2);
  EXPECT_EQ(engine_->stats().blocks_used(), 0);
  ExpectConsistentSteps();
}

// A step fails while the next one is in flight: the engine waits for that one too, holds every
// request of both, and they resume exactly when the group re-forms.
TEST_F(EngineTest, AFailedStepWithAnotherInFlightHoldsTheRequestsOfBoth) {
  EngineOptions options;
  options.steps_in_flight = 2;
  StartWithRank2FailingAt(6, absl::Seconds(60), options);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back({400 + i, 410, 420 + i, 430});
  std::vector<Generated> outs(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] { outs[i] = Generate(Request(prompts[i], 12)); });
  }
  AwaitHeld(4);
  EXPECT_EQ(engine_->stats().blocks_used(), 0);
  rank_back_ = true;
  for (auto& client : clients) client.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << i << ": " << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, Expected(prompts[i], 12)) << i;
  }
  const EngineStats stats = engine_->stats();
  EXPECT_EQ(stats.recovery.requests_held, 4);
  EXPECT_EQ(stats.recovery.recoveries, 1);
  EXPECT_EQ(stats.blocks_used(), 0);
  ExpectConsistentSteps();
}

}  // namespace
}  // namespace tpserve::testing
