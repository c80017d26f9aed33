// The failure model's clock-driven part (engine.h): the grace, what health and the pause say,
// and what a late re-formation fails, with the time moved by the test rather than waited for.
#include "coordinator/recovery_state.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

class RecoveryStateTest : public ::testing::Test {
 protected:
  RecoveryState State(absl::Duration grace) {
    return RecoveryState(grace, [this] { return now_; });
  }
  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
};

TEST_F(RecoveryStateTest, ServingUntilDegradedAndTheFirstCauseSticks) {
  RecoveryState state = State(absl::Seconds(60));
  EXPECT_TRUE(state.serving());
  EXPECT_TRUE(state.Health().ok());
  EXPECT_FALSE(state.Pause(false).has_value());
  EXPECT_TRUE(state.MarkDegraded(absl::UnavailableError("rank 2: connection reset")));
  EXPECT_FALSE(state.MarkDegraded(absl::UnavailableError("rank 1: timeout")));
  EXPECT_FALSE(state.serving());
  EXPECT_EQ(state.degraded().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(state.degraded().message(), "cluster degraded: rank 2: connection reset");
}

TEST_F(RecoveryStateTest, WithinTheGraceHealthAndPauseSayHowLongAndWhatFor) {
  RecoveryState state = State(absl::Seconds(60));
  state.MarkDegraded(absl::UnavailableError("rank 2: connection reset"));
  now_ += absl::Seconds(15);
  state.SetWaitingFor("rank 2 to register");
  EXPECT_TRUE(state.WithinGrace());
  EXPECT_THAT(state.Health().message(),
              HasSubstr("held for 45s more, waiting for rank 2 to register"));
  ASSERT_TRUE(state.Pause(false).has_value());
  EXPECT_EQ(state.Pause(false)->waiting_for, "rank 2 to register");
  EXPECT_EQ(state.Pause(false)->grace_left, absl::Seconds(45));
}

TEST_F(RecoveryStateTest, PastTheGraceHealthIsTheCauseAndThePauseOnlyWhileHolding) {
  RecoveryState state = State(absl::Seconds(60));
  state.MarkDegraded(absl::UnavailableError("rank 2: connection reset"));
  now_ += absl::Seconds(60);
  EXPECT_FALSE(state.WithinGrace());
  EXPECT_EQ(state.Health(), state.degraded());
  EXPECT_FALSE(state.Pause(false).has_value());
  ASSERT_TRUE(state.Pause(true).has_value());  // a re-formation attempt still runs
  EXPECT_EQ(state.Pause(true)->grace_left, absl::ZeroDuration());
  EXPECT_THAT(state.GraceExpired().message(),
              HasSubstr("rank 2: connection reset; the group did not re-form within the recovery "
                        "grace of 1m"));
}

TEST_F(RecoveryStateTest, WithoutAGraceRequestsFailWithTheCause) {
  RecoveryState state = State(absl::ZeroDuration());
  state.MarkDegraded(absl::UnavailableError("rank 0: gone"));
  EXPECT_FALSE(state.WithinGrace());
  EXPECT_EQ(state.GraceExpired(), state.degraded());
}

TEST_F(RecoveryStateTest, AReformationWithinTheGraceResumesAndOnePastItFailsWhatWasHeld) {
  RecoveryState state = State(absl::Seconds(10));
  state.MarkDegraded(absl::UnavailableError("rank 1: gone"));
  now_ += absl::Seconds(4);
  RecoveryState::Reformed in_time = state.Reform();
  EXPECT_TRUE(state.serving());
  EXPECT_EQ(in_time.degraded_for, absl::Seconds(4));
  EXPECT_TRUE(in_time.late.ok());
  EXPECT_THAT(in_time.cause.message(), HasSubstr("rank 1: gone"));

  state.MarkDegraded(absl::UnavailableError("rank 1: gone again"));
  now_ += absl::Seconds(12);
  RecoveryState::Reformed late = state.Reform();
  EXPECT_TRUE(state.serving());
  EXPECT_EQ(late.degraded_for, absl::Seconds(12));
  EXPECT_THAT(late.late.message(), HasSubstr("rank 1: gone again; the group did not re-form"));
  EXPECT_TRUE(state.Health().ok());
}

}  // namespace
}  // namespace tpserve
