// ProposeNgram against hand-worked token lists.
#include "coordinator/ngram_proposer.h"

#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

using V = std::vector<int32_t>;

TEST(ProposeNgram, TakesWhatFollowedTheLatestEarlierOccurrence) {
  // Suffix [7, 8] occurs at 1 and at 5; the latest (5) was followed by 4, 7, 8.
  const V tokens = {1, 7, 8, 2, 3, 7, 8, 4, 7, 8};
  EXPECT_EQ(ProposeNgram(tokens, {2, 4}, 3), (V{4, 7, 8}));
  EXPECT_EQ(ProposeNgram(tokens, {2, 4}, 1), (V{4}));
}

TEST(ProposeNgram, PrefersTheLongestSuffixThatOccurs) {
  // [3, 7, 8] occurs at 4 (followed by 9); [7, 8] alone occurs later, at 9 (followed by 5).
  const V tokens = {1, 2, 3, 4, 3, 7, 8, 9, 0, 7, 8, 5, 3, 7, 8};
  EXPECT_EQ(ProposeNgram(tokens, {2, 3}, 2), (V{9, 0}));
  EXPECT_EQ(ProposeNgram(tokens, {2, 2}, 2), (V{5, 3}));
}

TEST(ProposeNgram, StopsAtTheEndOfWhatIsKnown) {
  const V tokens = {5, 6, 5, 6};  // [5, 6] at 0 is followed by 5, 6 and then the end
  EXPECT_EQ(ProposeNgram(tokens, {2, 4}, 8), (V{5, 6}));
}

TEST(ProposeNgram, NothingWithoutAMatchOrRoom) {
  EXPECT_TRUE(ProposeNgram(V{1, 2, 3, 4}, {2, 4}, 4).empty());
  EXPECT_TRUE(ProposeNgram(V{1, 2, 1, 2}, {2, 4}, 0).empty());
  EXPECT_TRUE(ProposeNgram(V{1}, {1, 4}, 4).empty());
  EXPECT_TRUE(ProposeNgram(V{}, {1, 4}, 4).empty());
}

}  // namespace
}  // namespace tpserve
