#include "coordinator/block_pool.h"

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::ElementsAreArray;

// One call on the pool and the exact state it must leave behind.
struct Step {
  enum class Op { kAllocate, kRef, kRelease };
  Op op;
  int32_t n = 0;                                  // kAllocate: blocks asked for
  std::vector<int32_t> ids;                       // kRef, kRelease: the ids passed
  std::optional<std::vector<int32_t>> allocated;  // kAllocate: the exact answer
  std::vector<int32_t> ref_counts;                // after the step: [num_blocks]
};

Step Allocate(int32_t n, std::optional<std::vector<int32_t>> allocated,
              std::vector<int32_t> ref_counts) {
  return {Step::Op::kAllocate, n, {}, std::move(allocated), std::move(ref_counts)};
}
Step Ref(std::vector<int32_t> ids, std::vector<int32_t> ref_counts) {
  return {Step::Op::kRef, 0, std::move(ids), std::nullopt, std::move(ref_counts)};
}
Step Release(std::vector<int32_t> ids, std::vector<int32_t> ref_counts) {
  return {Step::Op::kRelease, 0, std::move(ids), std::nullopt, std::move(ref_counts)};
}

struct Scenario {
  std::string name;
  int32_t num_blocks;
  std::vector<Step> steps;
};

const std::vector<Scenario>& Scenarios() {
  static const auto* scenarios = new std::vector<Scenario>{
      {"LowestIdsFirstAndFreedIdsReusedLast",
       5,
       {
           Allocate(2, {{0, 1}}, {1, 1, 0, 0, 0}),
           Allocate(2, {{2, 3}}, {1, 1, 1, 1, 0}),
           Release({0, 1}, {0, 0, 1, 1, 0}),
           Allocate(3, {{4, 0, 1}}, {1, 1, 1, 1, 1}),
       }},
      {"RunningOutIsNulloptAndTakesNothing",
       3,
       {
           Allocate(2, {{0, 1}}, {1, 1, 0}),
           Allocate(2, std::nullopt, {1, 1, 0}),
           Allocate(0, {{}}, {1, 1, 0}),
           Allocate(1, {{2}}, {1, 1, 1}),
           Allocate(1, std::nullopt, {1, 1, 1}),
       }},
      {"ReleaseOrderIsReuseOrder",
       4,
       {
           Allocate(4, {{0, 1, 2, 3}}, {1, 1, 1, 1}),
           Release({3, 1}, {1, 0, 1, 0}),
           Release({0}, {0, 0, 1, 0}),
           Allocate(3, {{3, 1, 0}}, {1, 1, 1, 1}),
       }},
      {"SharedBlockIsFreeOnlyAfterItsLastRelease",
       4,
       {
           Allocate(2, {{0, 1}}, {1, 1, 0, 0}),
           Ref({1}, {1, 2, 0, 0}),
           Release({0, 1}, {0, 1, 0, 0}),
           Allocate(3, {{2, 3, 0}}, {1, 1, 1, 1}),
           Allocate(1, std::nullopt, {1, 1, 1, 1}),
           Release({1}, {1, 0, 1, 1}),
           Allocate(1, {{1}}, {1, 1, 1, 1}),
       }},
      {"SameIdTwiceInOneCallCountsTwice",
       2,
       {
           Allocate(1, {{0}}, {1, 0}),
           Ref({0, 0}, {3, 0}),
           Release({0, 0}, {1, 0}),
           Release({0}, {0, 0}),
           Allocate(2, {{1, 0}}, {1, 1}),
       }},
      {"EmptyPool",
       0,
       {
           Allocate(0, {{}}, {}),
           Allocate(1, std::nullopt, {}),
       }},
  };
  return *scenarios;
}

// gtest prints a failing parameter with this; the default is a byte dump.
void PrintTo(const Scenario& scenario, std::ostream* os) { *os << scenario.name; }

class BlockPoolScenario : public ::testing::TestWithParam<Scenario> {};

TEST_P(BlockPoolScenario, EveryStepLeavesTheExpectedIdsAndCounts) {
  const Scenario& scenario = GetParam();
  BlockPool pool(scenario.num_blocks);
  ASSERT_EQ(pool.num_blocks(), scenario.num_blocks);
  ASSERT_EQ(pool.num_free(), scenario.num_blocks);
  for (size_t i = 0; i < scenario.steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const Step& step = scenario.steps[i];
    switch (step.op) {
      case Step::Op::kAllocate: {
        const std::optional<std::vector<int32_t>> got = pool.Allocate(step.n);
        ASSERT_EQ(got.has_value(), step.allocated.has_value());
        if (got.has_value()) {
          EXPECT_THAT(*got, ElementsAreArray(*step.allocated));
        }
        break;
      }
      case Step::Op::kRef:
        pool.Ref(step.ids);
        break;
      case Step::Op::kRelease:
        pool.Release(step.ids);
        break;
    }
    ASSERT_EQ(static_cast<int32_t>(step.ref_counts.size()), pool.num_blocks());
    int32_t num_free = 0;
    for (int32_t id = 0; id < pool.num_blocks(); ++id) {
      EXPECT_EQ(pool.ref_count(id), step.ref_counts[id]) << "block " << id;
      num_free += step.ref_counts[id] == 0;
    }
    EXPECT_EQ(pool.num_free(), num_free);
  }
}

INSTANTIATE_TEST_SUITE_P(Tables, BlockPoolScenario, ::testing::ValuesIn(Scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           return info.param.name;
                         });

TEST(BlockPoolDeathTest, ReleasingAFreeBlockIsABug) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.Release({1}), "released a free block");
}

TEST(BlockPoolDeathTest, DoubleReleaseIsABug) {
  BlockPool pool(2);
  std::vector<int32_t> ids = *pool.Allocate(1);
  pool.Release(ids);
  EXPECT_DEATH(pool.Release(ids), "released a free block");
}

TEST(BlockPoolDeathTest, ReleasingMoreTimesThanReferencedIsABug) {
  BlockPool pool(2);
  std::vector<int32_t> ids = *pool.Allocate(1);
  pool.Ref(ids);
  pool.Release(ids);
  pool.Release(ids);
  EXPECT_DEATH(pool.Release(ids), "released a free block");
}

TEST(BlockPoolDeathTest, RefOnAFreeBlockIsABug) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.Ref({0}), "Ref on a free block");
}

TEST(BlockPoolDeathTest, OutOfRangeIdsAreABug) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.Release({2}), "id < num_blocks");
  EXPECT_DEATH(pool.Ref({-1}), "id >= 0");
  EXPECT_DEATH(pool.ref_count(2), "id < num_blocks");
}

}  // namespace
}  // namespace tpserve
