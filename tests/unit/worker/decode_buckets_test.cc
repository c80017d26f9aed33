// DecodeBuckets: the batch sizes decode graphs are captured for.
#include "worker/decode_buckets.h"

#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(DecodeBuckets, PowersOfTwoThenMultiplesOfEightUpToTheLimit) {
  const std::vector<int64_t> buckets = DecodeBuckets(256);
  ASSERT_EQ(buckets.size(), 35u);  // 1, 2, 4 and the 32 multiples of 8 up to 256
  EXPECT_EQ(buckets[0], 1);
  EXPECT_EQ(buckets[3], 8);
  EXPECT_EQ(buckets[4], 16);
  EXPECT_EQ(buckets.back(), 256);
}

TEST(DecodeBuckets, TheLimitItselfIsTheLastBucket) {
  EXPECT_EQ(DecodeBuckets(20), (std::vector<int64_t>{1, 2, 4, 8, 16, 20}));
  EXPECT_EQ(DecodeBuckets(3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(DecodeBuckets(1), (std::vector<int64_t>{1}));
  EXPECT_TRUE(DecodeBuckets(0).empty());
}

}  // namespace
}  // namespace tpserve
