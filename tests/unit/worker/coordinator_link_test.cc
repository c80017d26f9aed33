// The schedule a worker re-registers on: the first retry within a second, doubling, capped, so
// that a restarted coordinator hears from every rank within the cap of its start.
#include "worker/coordinator_link.h"

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(RegisterBackoff, DoublesFromUnderASecondToItsCap) {
  const RegisterBackoff backoff;
  EXPECT_LT(backoff.Nominal(0), absl::Seconds(1));
  EXPECT_EQ(backoff.Nominal(1), 2 * backoff.Nominal(0));
  EXPECT_EQ(backoff.Nominal(2), 4 * backoff.Nominal(0));
  EXPECT_EQ(backoff.Nominal(30), backoff.max);
  EXPECT_EQ(backoff.Nominal(1 << 20), backoff.max);
  EXPECT_LE(backoff.max, absl::Seconds(2));
  EXPECT_GT(backoff.jitter, 0.0);
  EXPECT_LT(backoff.jitter, 1.0);
}

}  // namespace
}  // namespace tpserve
