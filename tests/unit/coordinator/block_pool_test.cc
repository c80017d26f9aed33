#include "coordinator/block_pool.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::ElementsAre;

TEST(BlockPool, AllocatesLowestIdsFirstAndReusesFreedIdsLast) {
  BlockPool pool(5);
  EXPECT_EQ(pool.num_blocks(), 5);
  EXPECT_EQ(pool.num_free(), 5);
  auto a = pool.Allocate(2);
  ASSERT_TRUE(a.has_value());
  EXPECT_THAT(*a, ElementsAre(0, 1));
  auto b = pool.Allocate(2);
  ASSERT_TRUE(b.has_value());
  EXPECT_THAT(*b, ElementsAre(2, 3));
  EXPECT_EQ(pool.num_free(), 1);
  pool.Free(*a);
  EXPECT_EQ(pool.num_free(), 3);
  auto c = pool.Allocate(3);
  ASSERT_TRUE(c.has_value());
  EXPECT_THAT(*c, ElementsAre(4, 0, 1));
}

TEST(BlockPool, RunningOutIsAnEmptyOptionalAndTakesNothing) {
  BlockPool pool(3);
  auto a = pool.Allocate(2);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(pool.Allocate(2).has_value());
  EXPECT_EQ(pool.num_free(), 1);
  auto zero = pool.Allocate(0);
  ASSERT_TRUE(zero.has_value());
  EXPECT_TRUE(zero->empty());
  auto last = pool.Allocate(1);
  ASSERT_TRUE(last.has_value());
  EXPECT_THAT(*last, ElementsAre(2));
  EXPECT_FALSE(pool.Allocate(1).has_value());
}

TEST(BlockPoolDeathTest, DoubleFreeIsABug) {
  BlockPool pool(2);
  auto a = pool.Allocate(1);
  pool.Free(*a);
  EXPECT_DEATH(pool.Free(*a), "freed twice");
}

}  // namespace
}  // namespace tpserve
