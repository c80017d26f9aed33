#include "coordinator/radix_cache.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "coordinator/block_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::UnorderedElementsAreArray;

// ---------------------------------------------------------------------------------------------
// Scenario tables. Block size 2, so prompts read as token pairs. The test holds one reference on
// every block of a 64-block pool from the start, as running requests would, so any id in the
// tables can be inserted; a block is then at ref count 2 exactly while the tree holds it.

constexpr int32_t kScenarioBlockSize = 2;
constexpr int32_t kScenarioPoolBlocks = 64;

// State the tree must be in after a step.
struct Expect {
  std::vector<int32_t> cached;  // CachedBlockIds(), any order
  int32_t num_nodes;
  int32_t num_evictable;
};

struct Step {
  enum class Op { kMatch, kInsert, kLockLast, kUnlock, kEvict, kEvictAll };
  Op op;
  std::vector<int32_t> tokens;     // kMatch, kInsert
  std::vector<int32_t> block_ids;  // kMatch: the exact answer; kInsert: the caller's blocks
  int32_t arg = 0;     // kEvict: blocks asked for; kUnlock: which earlier kLockLast, from 0
  int32_t result = 0;  // kInsert: new blocks; kEvict, kEvictAll: blocks removed
  Expect expect;
};

Step Match(std::vector<int32_t> tokens, std::vector<int32_t> matched, Expect expect) {
  return {Step::Op::kMatch, std::move(tokens), std::move(matched), 0, 0, std::move(expect)};
}
Step Insert(std::vector<int32_t> tokens, std::vector<int32_t> ids, int32_t num_new, Expect expect) {
  return {Step::Op::kInsert, std::move(tokens), std::move(ids), 0, num_new, std::move(expect)};
}
// Locks the node the previous Match or Insert returned.
Step LockLast(Expect expect) { return {Step::Op::kLockLast, {}, {}, 0, 0, std::move(expect)}; }
Step Unlock(int32_t lock_index, Expect expect) {
  return {Step::Op::kUnlock, {}, {}, lock_index, 0, std::move(expect)};
}
Step Evict(int32_t n, int32_t removed, Expect expect) {
  return {Step::Op::kEvict, {}, {}, n, removed, std::move(expect)};
}
Step EvictAll(int32_t removed, Expect expect) {
  return {Step::Op::kEvictAll, {}, {}, 0, removed, std::move(expect)};
}

struct Scenario {
  std::string name;
  std::vector<Step> steps;
};

const std::vector<Scenario>& Scenarios() {
  static const auto* scenarios = new std::vector<Scenario>{
      {"MatchOnEmptyTreeFindsNothing",
       {
           Match({1, 2, 3, 4}, {}, {{}, 0, 0}),
           Match({}, {}, {{}, 0, 0}),
       }},
      {"MatchTakesWholeBlocksAndSplitsWhereItEndsInsideAnEdge",
       {
           Insert({1, 2, 3, 4, 5, 6}, {10, 11, 12}, 3, {{10, 11, 12}, 1, 3}),
           // The trailing partial block never matches.
           Match({1, 2, 3, 4, 5, 6, 7}, {10, 11, 12}, {{10, 11, 12}, 1, 3}),
           Match({1, 2, 3, 4, 5, 6, 7, 8}, {10, 11, 12}, {{10, 11, 12}, 1, 3}),
           Match({1}, {}, {{10, 11, 12}, 1, 3}),
           Match({9, 9, 3, 4}, {}, {{10, 11, 12}, 1, 3}),
           // Diverges in the second block: [10 | 11 12].
           Match({1, 2, 3, 9}, {10}, {{10, 11, 12}, 2, 3}),
           // Ends after the second block: [10 | 11 | 12].
           Match({1, 2, 3, 4}, {10, 11}, {{10, 11, 12}, 3, 3}),
           Match({1, 2, 3, 4, 5, 6}, {10, 11, 12}, {{10, 11, 12}, 3, 3}),
       }},
      {"InsertKeepsCachedBlocksAndSplitsWhereItDiverges",
       {
           Insert({1, 2, 3, 4, 5, 6}, {10, 11, 12}, 3, {{10, 11, 12}, 1, 3}),
           // [10 11 | 12] and [10 11 | 22]: the caller's 20 and 21 stay the caller's.
           Insert({1, 2, 3, 4, 7, 8}, {20, 21, 22}, 1, {{10, 11, 12, 22}, 3, 4}),
           Match({1, 2, 3, 4, 7, 8}, {10, 11, 22}, {{10, 11, 12, 22}, 3, 4}),
           // Ends on a node boundary: nothing new, no split.
           Insert({1, 2, 3, 4}, {30, 31}, 0, {{10, 11, 12, 22}, 3, 4}),
           // Ends inside [10 11]: split into [10 | 11].
           Insert({1, 2}, {40}, 0, {{10, 11, 12, 22}, 4, 4}),
           // Extends the leaf [12] with a child rather than growing its edge.
           Insert({1, 2, 3, 4, 5, 6, 7, 8}, {50, 51, 52, 53}, 1, {{10, 11, 12, 22, 53}, 5, 5}),
           Match({1, 2, 3, 4, 5, 6, 7, 8}, {10, 11, 12, 53}, {{10, 11, 12, 22, 53}, 5, 5}),
           Insert({}, {}, 0, {{10, 11, 12, 22, 53}, 5, 5}),
       }},
      {"SiblingsWhoseFirstBlocksDifferOnlyInTheirLastToken",
       {
           Insert({1, 2, 3, 4}, {10, 11}, 2, {{10, 11}, 1, 2}),
           Insert({1, 3, 3, 4}, {20, 21}, 2, {{10, 11, 20, 21}, 2, 4}),
           Insert({1, 4, 3, 4}, {30, 31}, 2, {{10, 11, 20, 21, 30, 31}, 3, 6}),
           Match({1, 3, 3, 4}, {20, 21}, {{10, 11, 20, 21, 30, 31}, 3, 6}),
           Match({1, 2, 3, 4}, {10, 11}, {{10, 11, 20, 21, 30, 31}, 3, 6}),
           Match({1, 4, 3, 4}, {30, 31}, {{10, 11, 20, 21, 30, 31}, 3, 6}),
           Match({1, 5, 3, 4}, {}, {{10, 11, 20, 21, 30, 31}, 3, 6}),
       }},
      {"EvictionTakesTheLeastRecentlyUsedLeafFromItsTail",
       {
           Insert({1, 2, 3, 4, 5, 6}, {10, 11, 12}, 3, {{10, 11, 12}, 1, 3}),
           Insert({7, 8, 9, 9}, {20, 21}, 2, {{10, 11, 12, 20, 21}, 2, 5}),
           Insert({5, 5}, {30}, 1, {{10, 11, 12, 20, 21, 30}, 3, 6}),
           // Using [10 11 12] again leaves [20 21] the least recently used, then [30].
           Match({1, 2, 3, 4, 5, 6}, {10, 11, 12}, {{10, 11, 12, 20, 21, 30}, 3, 6}),
           Evict(1, 1, {{10, 11, 12, 20, 30}, 3, 5}),
           Evict(2, 2, {{10, 11, 12}, 1, 3}),
           Evict(2, 2, {{10}, 1, 1}),
           EvictAll(1, {{}, 0, 0}),
           Evict(1, 0, {{}, 0, 0}),
           EvictAll(0, {{}, 0, 0}),
       }},
      {"ParentBecomesAnEvictableLeafOnceItsChildrenAreGone",
       {
           Insert({1, 2, 3, 4}, {10, 11}, 2, {{10, 11}, 1, 2}),
           // [10 | 11] and [10 | 21]; [10] is stamped now, [11] keeps its older time.
           Insert({1, 2, 5, 6}, {20, 21}, 1, {{10, 11, 21}, 3, 3}),
           Insert({9, 9}, {30}, 1, {{10, 11, 21, 30}, 4, 4}),
           Evict(1, 1, {{10, 21, 30}, 3, 3}),
           Evict(1, 1, {{10, 30}, 2, 2}),
           // [10] is a leaf now and older than [30].
           Evict(1, 1, {{30}, 1, 1}),
           Evict(1, 1, {{}, 0, 0}),
       }},
      {"ALockProtectsItsNodeAndEveryAncestor",
       {
           Insert({1, 2, 3, 4, 5, 6}, {10, 11, 12}, 3, {{10, 11, 12}, 1, 3}),
           Match({1, 2}, {10}, {{10, 11, 12}, 2, 3}),
           Match({1, 2, 3, 4}, {10, 11}, {{10, 11, 12}, 3, 3}),
           // Locks [11] and its ancestor [10]; only [12] stays evictable.
           LockLast({{10, 11, 12}, 3, 1}),
           Insert({1, 2, 7, 7}, {20, 21}, 1, {{10, 11, 12, 21}, 4, 2}),
           EvictAll(2, {{10, 11}, 2, 0}),
           Evict(5, 0, {{10, 11}, 2, 0}),
           Unlock(0, {{10, 11}, 2, 2}),
           Evict(1, 1, {{10}, 1, 1}),
       }},
      {"UsingADescendantRefreshesItsAncestors",
       {
           Insert({1, 2, 3, 4}, {10, 11}, 2, {{10, 11}, 1, 2}),
           Match({1, 2}, {10}, {{10, 11}, 2, 2}),
           Insert({9, 9}, {30}, 1, {{10, 11, 30}, 3, 3}),
           LockLast({{10, 11, 30}, 3, 2}),
           // Stamps [11] and, through it, [10]: both are now newer than [30].
           Match({1, 2, 3, 4}, {10, 11}, {{10, 11, 30}, 3, 2}),
           Evict(1, 1, {{10, 30}, 2, 1}),
           Unlock(0, {{10, 30}, 2, 2}),
           Evict(1, 1, {{10}, 1, 1}),
       }},
      {"ALockedHandleSurvivesASplitAboveIt",
       {
           Insert({1, 2, 3, 4, 5, 6}, {10, 11, 12}, 3, {{10, 11, 12}, 1, 3}),
           LockLast({{10, 11, 12}, 1, 0}),
           // Splits the locked edge into [10 | 11 12]; the head inherits the lock.
           Match({1, 2}, {10}, {{10, 11, 12}, 2, 0}),
           Insert({1, 2, 8, 8}, {20, 21}, 1, {{10, 11, 12, 21}, 3, 1}),
           EvictAll(1, {{10, 11, 12}, 2, 0}),
           Unlock(0, {{10, 11, 12}, 2, 3}),
           Evict(1, 1, {{10, 11}, 2, 2}),
           Evict(1, 1, {{10}, 1, 1}),
       }},
      {"EveryLockNeedsItsOwnUnlock",
       {
           Insert({1, 2, 3, 4}, {10, 11}, 2, {{10, 11}, 1, 2}),
           LockLast({{10, 11}, 1, 0}),
           Match({1, 2, 3, 4}, {10, 11}, {{10, 11}, 1, 0}),
           LockLast({{10, 11}, 1, 0}),
           Unlock(0, {{10, 11}, 1, 0}),
           EvictAll(0, {{10, 11}, 1, 0}),
           Unlock(1, {{10, 11}, 1, 2}),
           EvictAll(2, {{}, 0, 0}),
       }},
      {"LockingTheRootLocksNothing",
       {
           Insert({1, 2}, {10}, 1, {{10}, 1, 1}),
           Match({3, 4}, {}, {{10}, 1, 1}),
           LockLast({{10}, 1, 1}),
           EvictAll(1, {{}, 0, 0}),
           Unlock(0, {{}, 0, 0}),
       }},
  };
  return *scenarios;
}

// gtest prints a failing parameter with this; the default is a byte dump.
void PrintTo(const Scenario& scenario, std::ostream* os) { *os << scenario.name; }

class RadixCacheScenario : public ::testing::TestWithParam<Scenario> {};

TEST_P(RadixCacheScenario, EveryStepLeavesTheExpectedTree) {
  BlockPool pool(kScenarioPoolBlocks);
  ASSERT_TRUE(pool.Allocate(kScenarioPoolBlocks).has_value());
  RadixCache cache(kScenarioBlockSize, &pool);
  RadixCache::Node* last = nullptr;
  std::vector<RadixCache::Node*> locked;
  const std::vector<Step>& steps = GetParam().steps;
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const Step& step = steps[i];
    switch (step.op) {
      case Step::Op::kMatch: {
        RadixCache::MatchResult match = cache.Match(step.tokens);
        EXPECT_THAT(match.block_ids, ElementsAreArray(step.block_ids));
        last = match.node;
        break;
      }
      case Step::Op::kInsert: {
        RadixCache::InsertResult insert = cache.Insert(step.tokens, step.block_ids);
        EXPECT_EQ(insert.num_new_blocks, step.result);
        last = insert.node;
        break;
      }
      case Step::Op::kLockLast:
        ASSERT_NE(last, nullptr);
        cache.Lock(last);
        locked.push_back(last);
        break;
      case Step::Op::kUnlock:
        cache.Unlock(locked.at(step.arg));
        break;
      case Step::Op::kEvict:
        EXPECT_EQ(cache.Evict(step.arg), step.result);
        break;
      case Step::Op::kEvictAll:
        EXPECT_EQ(cache.EvictAll(), step.result);
        break;
    }
    EXPECT_THAT(cache.CachedBlockIds(), UnorderedElementsAreArray(step.expect.cached));
    EXPECT_EQ(cache.num_cached_blocks(), static_cast<int32_t>(step.expect.cached.size()));
    EXPECT_EQ(cache.num_nodes(), step.expect.num_nodes);
    EXPECT_EQ(cache.num_evictable_blocks(), step.expect.num_evictable);
    const std::set<int32_t> cached(step.expect.cached.begin(), step.expect.cached.end());
    for (int32_t id = 0; id < kScenarioPoolBlocks; ++id) {
      EXPECT_EQ(pool.ref_count(id), 1 + static_cast<int32_t>(cached.count(id))) << "block " << id;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tables, RadixCacheScenario, ::testing::ValuesIn(Scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           return info.param.name;
                         });

TEST(RadixCache, MatchedNodeCoversExactlyTheMatchedBlocks) {
  BlockPool pool(8);
  RadixCache cache(2, &pool);
  std::vector<int32_t> ids = *pool.Allocate(3);
  RadixCache::InsertResult insert = cache.Insert({1, 2, 3, 4, 5, 6}, ids);
  RadixCache::MatchResult whole = cache.Match({1, 2, 3, 4, 5, 6});
  EXPECT_EQ(whole.node, insert.node);
  RadixCache::MatchResult head = cache.Match({1, 2, 3, 4});
  EXPECT_NE(head.node, insert.node);
  // Locking the head leaves exactly the third block evictable.
  cache.Lock(head.node);
  EXPECT_EQ(cache.num_evictable_blocks(), 1);
  EXPECT_EQ(cache.Match({1, 2, 3, 4}).node, head.node);
  EXPECT_EQ(cache.Match({1, 2}).block_ids, std::vector<int32_t>({0}));
  cache.Unlock(head.node);
}

TEST(RadixCache, EvictedBlocksReturnToThePoolTailFirst) {
  BlockPool pool(8);
  RadixCache cache(2, &pool);
  std::vector<int32_t> ids = *pool.Allocate(3);
  ASSERT_THAT(ids, ElementsAre(0, 1, 2));
  EXPECT_EQ(cache.Insert({1, 2, 3, 4, 5, 6}, ids).num_new_blocks, 3);
  EXPECT_EQ(pool.ref_count(1), 2);
  pool.Release(ids);  // the request finished: only the tree holds them
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(cache.Evict(3), 3);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_THAT(*pool.Allocate(8), ElementsAre(3, 4, 5, 6, 7, 2, 1, 0));
}

TEST(RadixCache, EvictingABlockARequestStillHoldsDoesNotFreeIt) {
  BlockPool pool(4);
  RadixCache cache(2, &pool);
  std::vector<int32_t> ids = *pool.Allocate(2);
  cache.Insert({1, 2, 3, 4}, ids);
  EXPECT_EQ(cache.EvictAll(), 2);
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(RadixCache, InsertKeepsTheTreesBlockAndLeavesTheCallersToTheCaller) {
  BlockPool pool(8);
  RadixCache cache(2, &pool);
  std::vector<int32_t> first = *pool.Allocate(2);
  std::vector<int32_t> second = *pool.Allocate(3);
  ASSERT_THAT(first, ElementsAre(0, 1));
  ASSERT_THAT(second, ElementsAre(2, 3, 4));
  cache.Insert({1, 2, 3, 4}, first);
  RadixCache::InsertResult insert = cache.Insert({1, 2, 3, 4, 5, 6}, second);
  EXPECT_EQ(insert.num_new_blocks, 1);
  EXPECT_THAT(cache.Match({1, 2, 3, 4, 5, 6}).block_ids, ElementsAre(0, 1, 4));
  EXPECT_EQ(pool.ref_count(0), 2);
  EXPECT_EQ(pool.ref_count(2), 1);
  EXPECT_EQ(pool.ref_count(3), 1);
  EXPECT_EQ(pool.ref_count(4), 2);
}

TEST(RadixCache, StatsCountQueriesTokensAndHits) {
  BlockPool pool(8);
  RadixCache cache(4, &pool);
  cache.Insert({1, 2, 3, 4, 5, 6, 7, 8}, *pool.Allocate(2));
  cache.Match({1, 2, 3, 4, 5, 6, 7, 8, 9});  // 9 tokens, 8 hit
  cache.Match({1, 2, 3, 4, 0, 0, 0});        // 7 tokens, 4 hit
  cache.Match({9});                          // 1 token, 0 hit
  EXPECT_EQ(cache.stats().queries, 3);
  EXPECT_EQ(cache.stats().query_tokens, 17);
  EXPECT_EQ(cache.stats().hit_tokens, 12);
}

TEST(RadixCache, DestructorReleasesEveryBlockTheTreeHolds) {
  BlockPool pool(16);
  {
    RadixCache cache(2, &pool);
    std::vector<int32_t> a = *pool.Allocate(3);
    std::vector<int32_t> b = *pool.Allocate(3);
    cache.Insert({1, 2, 3, 4, 5, 6}, a);
    cache.Insert({1, 2, 7, 7, 8, 8}, b);
    cache.Match({1, 2, 3, 4});
    pool.Release(a);
    pool.Release(b);
    EXPECT_EQ(pool.num_free(), 16 - 5);
    EXPECT_EQ(cache.num_nodes(), 4);
  }
  EXPECT_EQ(pool.num_free(), 16);
}

TEST(RadixCache, MatchingEveryPrefixSplitsAPromptIntoAChainOfOneBlockNodes) {
  constexpr int32_t kBlocks = 4096;
  BlockPool pool(kBlocks);
  {
    RadixCache cache(1, &pool);
    std::vector<int32_t> tokens(kBlocks);
    for (int32_t i = 0; i < kBlocks; ++i) tokens[i] = i;
    const std::vector<int32_t> ids = *pool.Allocate(kBlocks);
    cache.Insert(tokens, ids);
    pool.Release(ids);
    for (int32_t n = 1; n < kBlocks; ++n) {
      ASSERT_EQ(cache.Match(absl::MakeConstSpan(tokens).first(n)).block_ids.size(),
                static_cast<size_t>(n));
    }
    EXPECT_EQ(cache.num_nodes(), kBlocks);
    EXPECT_EQ(cache.Match(tokens).block_ids, ids);
    EXPECT_EQ(cache.Evict(1), 1);
    EXPECT_EQ(cache.num_nodes(), kBlocks - 1);
    EXPECT_EQ(pool.num_free(), 1);
  }
  EXPECT_EQ(pool.num_free(), kBlocks);
}

TEST(RadixCache, ThousandsOfSiblingsUnderTheRootEachFindTheirOwnBlocks) {
  constexpr int32_t kBlockSize = 4;
  constexpr int32_t kPrompts = 20000;
  BlockPool pool(kPrompts * 2);
  RadixCache cache(kBlockSize, &pool);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, 15);
  std::map<std::vector<int32_t>, std::vector<int32_t>> inserted;  // first two blocks -> ids
  while (static_cast<int32_t>(inserted.size()) < kPrompts) {
    std::vector<int32_t> prompt(2 * kBlockSize);
    for (int32_t& t : prompt) t = token(rng);
    if (inserted.count(prompt) || !cache.Match(prompt).block_ids.empty()) continue;
    std::vector<int32_t> ids = *pool.Allocate(2);
    cache.Insert(prompt, ids);
    inserted.emplace(prompt, ids);
  }
  for (const auto& [prompt, ids] : inserted) {
    EXPECT_EQ(cache.Match(prompt).block_ids, ids);
  }
}

TEST(RadixCacheDeathTest, UnlockWithoutLockIsABug) {
  BlockPool pool(4);
  RadixCache cache(2, &pool);
  RadixCache::InsertResult insert = cache.Insert({1, 2}, *pool.Allocate(1));
  EXPECT_DEATH(cache.Unlock(insert.node), "Unlock without a matching Lock");
}

TEST(RadixCacheDeathTest, UnlockingAnAncestorOfTheLockedNodeIsABug) {
  BlockPool pool(4);
  RadixCache cache(2, &pool);
  RadixCache::InsertResult insert = cache.Insert({1, 2, 3, 4}, *pool.Allocate(2));
  cache.Lock(insert.node);
  RadixCache::MatchResult head = cache.Match({1, 2});
  EXPECT_DEATH(cache.Unlock(head.node), "Unlock without a matching Lock");
}

TEST(RadixCacheDeathTest, InsertNeedsOneBlockIdPerWholeBlock) {
  BlockPool pool(4);
  RadixCache cache(2, &pool);
  std::vector<int32_t> ids = *pool.Allocate(2);
  EXPECT_DEATH(cache.Insert({1, 2, 3}, {ids[0]}), "check failed");
  EXPECT_DEATH(cache.Insert({1, 2, 3, 4}, {ids[0]}), "check failed");
}

TEST(RadixCacheDeathTest, InsertingAFreeBlockIsABug) {
  BlockPool pool(4);
  RadixCache cache(2, &pool);
  EXPECT_DEATH(cache.Insert({1, 2}, {3}), "Ref on a free block");
}

// ---------------------------------------------------------------------------------------------
// Randomized check against a brute-force model. The model knows nothing about nodes: it maps
// every cached block-prefix of tokens to its block and the clock of its last use, and derives
// the expected match, eviction victim, evictable count and every block's reference count from
// that and the simulated requests.

constexpr int32_t kBlockSize = 4;
constexpr int32_t kPoolBlocks = 32;
constexpr int32_t kMaxRequests = 6;
constexpr int32_t kVocab = 3;  // tiny, so prompts share and nearly share blocks all the time

using Tokens = std::vector<int32_t>;

Tokens Prefix(absl::Span<const int32_t> tokens, size_t num_blocks) {
  return Tokens(tokens.begin(), tokens.begin() + num_blocks * kBlockSize);
}

bool StartsWith(const Tokens& tokens, const Tokens& prefix) {
  return tokens.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), tokens.begin());
}

class ModelCache {
 public:
  struct Entry {
    int32_t block_id;
    uint64_t last_access;
  };

  std::vector<int32_t> Match(absl::Span<const int32_t> tokens) {
    ++clock_;
    std::vector<int32_t> ids;
    for (size_t n = 1; n <= tokens.size() / kBlockSize; ++n) {
      auto it = cached_.find(Prefix(tokens, n));
      if (it == cached_.end()) break;
      it->second.last_access = clock_;
      ids.push_back(it->second.block_id);
    }
    ++queries_;
    query_tokens_ += static_cast<int64_t>(tokens.size());
    hit_tokens_ += static_cast<int64_t>(ids.size()) * kBlockSize;
    return ids;
  }

  int32_t Insert(absl::Span<const int32_t> tokens, absl::Span<const int32_t> ids) {
    ++clock_;
    int32_t num_new = 0;
    for (size_t n = 1; n <= ids.size(); ++n) {
      auto [it, added] = cached_.try_emplace(Prefix(tokens, n), Entry{ids[n - 1], clock_});
      it->second.last_access = clock_;
      num_new += added;
    }
    return num_new;
  }

  // Removes up to `n` blocks, oldest unlocked leaf block first. Leaf blocks never share a last
  // access (those stamped by one call are prefixes of each other), so the victim is unique.
  int32_t Evict(int32_t n, const std::set<Tokens>& locked) {
    int32_t removed = 0;
    while (removed < n) {
      auto victim = cached_.end();
      int32_t num_oldest = 0;
      for (auto it = cached_.begin(); it != cached_.end(); ++it) {
        auto next = std::next(it);
        const bool leaf = next == cached_.end() || !StartsWith(next->first, it->first);
        if (!leaf || locked.count(it->first)) continue;
        if (victim == cached_.end() || it->second.last_access < victim->second.last_access) {
          victim = it;
          num_oldest = 1;
        } else if (it->second.last_access == victim->second.last_access) {
          ++num_oldest;
        }
      }
      if (victim == cached_.end()) break;
      EXPECT_EQ(num_oldest, 1) << "two evictable leaves share a last access";
      cached_.erase(victim);
      ++removed;
    }
    return removed;
  }

  int32_t NumEvictable(const std::set<Tokens>& locked) const {
    int32_t n = 0;
    for (const auto& [prefix, entry] : cached_) n += locked.count(prefix) == 0;
    return n;
  }

  const std::map<Tokens, Entry>& cached() const { return cached_; }
  int64_t queries() const { return queries_; }
  int64_t query_tokens() const { return query_tokens_; }
  int64_t hit_tokens() const { return hit_tokens_; }

 private:
  std::map<Tokens, Entry> cached_;  // every cached block-prefix -> its block
  uint64_t clock_ = 0;
  int64_t queries_ = 0;
  int64_t query_tokens_ = 0;
  int64_t hit_tokens_ = 0;
};

// A request as the scheduler would drive it: it holds one reference on each block of its
// block table (`blocks[i]` stores prompt block i) and may lock the node covering a prefix.
struct SimRequest {
  Tokens prompt;
  std::vector<int32_t> blocks;
  RadixCache::Node* locked = nullptr;
  Tokens locked_prefix;  // the tokens `locked` covers
};

class RandomizedRun {
 public:
  explicit RandomizedRun(uint32_t seed)
      : rng_(seed), pool_(kPoolBlocks), cache_(kBlockSize, &pool_) {
    std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
    for (Tokens& base : bases_) {
      base.resize(8 * kBlockSize);
      for (int32_t& t : base) t = token(rng_);
    }
  }

  void Step() {
    const int32_t op = Uniform(0, 99);
    if (op < 22) {
      Arrive();
    } else if (op < 30) {
      LockAgain();
    } else if (op < 38) {
      UnlockOne();
    } else if (op < 60) {
      Grow();
    } else if (op < 77) {
      InsertOne();
    } else if (op < 95) {
      Finish();
    } else if (op < 99) {
      EvictSome(Uniform(1, 8));
    } else {
      EvictEverything();
    }
  }

  void Check() {
    // The tree's blocks and counters.
    std::vector<int32_t> model_ids;
    for (const auto& [prefix, entry] : model_.cached()) model_ids.push_back(entry.block_id);
    ASSERT_THAT(cache_.CachedBlockIds(), UnorderedElementsAreArray(model_ids));
    ASSERT_EQ(cache_.num_cached_blocks(), static_cast<int32_t>(model_ids.size()));
    ASSERT_EQ(cache_.num_evictable_blocks(), model_.NumEvictable(LockedPrefixes()));
    ASSERT_LE(cache_.num_nodes(), cache_.num_cached_blocks());
    ASSERT_EQ(cache_.stats().queries, model_.queries());
    ASSERT_EQ(cache_.stats().query_tokens, model_.query_tokens());
    ASSERT_EQ(cache_.stats().hit_tokens, model_.hit_tokens());
    for (const SimRequest& r : requests_) {
      if (r.locked != nullptr && !r.locked_prefix.empty()) {
        ASSERT_TRUE(model_.cached().count(r.locked_prefix)) << "a locked prefix was evicted";
      }
    }

    // Every block is free, cached (only the tree holds it) or held (requests hold it, and the
    // tree may too), with exactly the references that implies.
    std::vector<int32_t> in_tree(kPoolBlocks, 0);
    std::vector<int32_t> held(kPoolBlocks, 0);
    for (int32_t id : model_ids) ++in_tree[id];
    for (const SimRequest& r : requests_) {
      for (int32_t id : r.blocks) ++held[id];
    }
    int32_t num_free = 0;
    for (int32_t id = 0; id < kPoolBlocks; ++id) {
      ASSERT_LE(in_tree[id], 1) << "block " << id << " is in the tree twice";
      ASSERT_EQ(pool_.ref_count(id), in_tree[id] + held[id]) << "block " << id;
      num_free += in_tree[id] + held[id] == 0;
    }
    ASSERT_EQ(pool_.num_free(), num_free);
  }

  int64_t evicted() const { return evicted_; }
  int64_t matched_blocks() const { return matched_blocks_; }

 private:
  int32_t Uniform(int32_t lo, int32_t hi) {
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng_);
  }

  // A prefix of one of a few shared bases, then a random tail; often not a whole number of
  // blocks.
  Tokens RandomPrompt() {
    const Tokens& base = bases_[Uniform(0, static_cast<int32_t>(bases_.size()) - 1)];
    Tokens prompt(base.begin(), base.begin() + Uniform(0, static_cast<int32_t>(base.size())));
    const int32_t tail = Uniform(0, 4 * kBlockSize);
    for (int32_t i = 0; i < tail; ++i) prompt.push_back(Uniform(0, kVocab - 1));
    return prompt;
  }

  SimRequest* RandomRequest() {
    if (requests_.empty()) return nullptr;
    return &requests_[Uniform(0, static_cast<int32_t>(requests_.size()) - 1)];
  }

  std::set<Tokens> LockedPrefixes() const {
    std::set<Tokens> locked;
    for (const SimRequest& r : requests_) {
      if (r.locked == nullptr) continue;
      for (size_t n = 1; n <= r.locked_prefix.size() / kBlockSize; ++n) {
        locked.insert(Prefix(r.locked_prefix, n));
      }
    }
    return locked;
  }

  RadixCache::MatchResult MatchBoth(const Tokens& prompt) {
    RadixCache::MatchResult match = cache_.Match(prompt);
    EXPECT_EQ(match.block_ids, model_.Match(prompt));
    matched_blocks_ += static_cast<int64_t>(match.block_ids.size());
    return match;
  }

  void LockNode(SimRequest& r, RadixCache::Node* node, size_t num_blocks) {
    cache_.Lock(node);
    r.locked = node;
    r.locked_prefix = Prefix(r.prompt, num_blocks);
  }

  void UnlockNode(SimRequest& r) {
    cache_.Unlock(r.locked);
    r.locked = nullptr;
    r.locked_prefix.clear();
  }

  // A new request takes references on its cached prefix and, usually, locks it.
  void Arrive() {
    if (static_cast<int32_t>(requests_.size()) >= kMaxRequests) return;
    SimRequest r;
    r.prompt = RandomPrompt();
    RadixCache::MatchResult match = MatchBoth(r.prompt);
    r.blocks = match.block_ids;
    pool_.Ref(r.blocks);
    if (Uniform(0, 3) > 0) LockNode(r, match.node, match.block_ids.size());
    requests_.push_back(std::move(r));
  }

  void LockAgain() {
    SimRequest* r = RandomRequest();
    if (r == nullptr || r->locked != nullptr) return;
    RadixCache::MatchResult match = MatchBoth(r->prompt);
    LockNode(*r, match.node, match.block_ids.size());
  }

  void UnlockOne() {
    SimRequest* r = RandomRequest();
    if (r == nullptr || r->locked == nullptr) return;
    UnlockNode(*r);
  }

  // Allocates fresh blocks for the rest of the prompt's whole blocks, evicting when short.
  void Grow() {
    SimRequest* r = RandomRequest();
    if (r == nullptr) return;
    const int32_t needed = static_cast<int32_t>(r->prompt.size() / kBlockSize - r->blocks.size());
    if (needed <= 0) return;
    if (pool_.num_free() < needed) EvictSome(needed - pool_.num_free());
    std::optional<std::vector<int32_t>> fresh = pool_.Allocate(needed);
    if (!fresh.has_value()) return;
    r->blocks.insert(r->blocks.end(), fresh->begin(), fresh->end());
  }

  // Caches the request's computed blocks and moves its lock to the node covering them.
  void InsertOne() {
    SimRequest* r = RandomRequest();
    if (r == nullptr) return;
    InsertBlocks(*r);
  }

  RadixCache::InsertResult InsertBlocks(SimRequest& r) {
    const Tokens tokens = Prefix(r.prompt, r.blocks.size());
    RadixCache::InsertResult insert = cache_.Insert(tokens, r.blocks);
    EXPECT_EQ(insert.num_new_blocks, model_.Insert(tokens, r.blocks));
    if (r.locked != nullptr) {
      cache_.Lock(insert.node);
      UnlockNode(r);
      r.locked = insert.node;
      r.locked_prefix = tokens;
    }
    return insert;
  }

  void Finish() {
    SimRequest* r = RandomRequest();
    if (r == nullptr) return;
    if (Uniform(0, 1) == 0) InsertBlocks(*r);
    if (r->locked != nullptr) UnlockNode(*r);
    pool_.Release(r->blocks);
    std::swap(*r, requests_.back());
    requests_.pop_back();
  }

  void EvictSome(int32_t n) {
    const int32_t removed = cache_.Evict(n);
    EXPECT_EQ(removed, model_.Evict(n, LockedPrefixes()));
    evicted_ += removed;
  }

  void EvictEverything() {
    const int32_t removed = cache_.EvictAll();
    EXPECT_EQ(removed, model_.Evict(std::numeric_limits<int32_t>::max(), LockedPrefixes()));
    EXPECT_EQ(cache_.num_evictable_blocks(), 0);
    evicted_ += removed;
  }

  std::mt19937 rng_;
  std::vector<Tokens> bases_ = std::vector<Tokens>(4);
  BlockPool pool_;
  RadixCache cache_;
  ModelCache model_;
  std::vector<SimRequest> requests_;
  int64_t evicted_ = 0;
  int64_t matched_blocks_ = 0;
};

TEST(RadixCacheRandomized, AgreesWithABruteForceModelAfterEveryOperation) {
  constexpr int32_t kSeeds = 4;
  constexpr int32_t kOpsPerSeed = 30000;
  int64_t matched_blocks = 0;
  int64_t evicted = 0;
  for (uint32_t seed = 1; seed <= kSeeds; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomizedRun run(seed);
    for (int32_t op = 0; op < kOpsPerSeed; ++op) {
      run.Step();
      run.Check();
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "first failure at operation " << op;
        return;
      }
    }
    matched_blocks += run.matched_blocks();
    evicted += run.evicted();
  }
  // Agreement only means something if the runs shared prefixes and evicted under pressure.
  EXPECT_GT(matched_blocks, kSeeds * kOpsPerSeed / 6);
  EXPECT_GT(evicted, kSeeds * kOpsPerSeed / 6);
}

}  // namespace
}  // namespace tpserve
