// The scheduler with steps in flight (pipeline stages), on the fixture's fake executor.
#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "coordinator/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/coordinator/scheduler_fixture.h"

namespace tpserve::testing {
namespace {

using ::testing::IsEmpty;
using ::testing::SizeIs;

// landed in the order planned, as the engine does with StepDispatcher. Any schedule must give
// what decoding each sequence alone gives.
class SchedulerInFlightTest : public SchedulerTest {
 protected:
  void Make(int32_t num_blocks, int32_t steps_in_flight) {
    SchedulerOptions options;
    options.steps_in_flight = steps_in_flight;
    SchedulerTest::Make(num_blocks, options);
  }

  // What the workers return for `batch`, applied: the computed tokens, and the next token of each
  // entry that completes its sequence; finished sequences move to done_.
  void Land(const ScheduledBatch& batch) {
    scheduler_->Commit(batch);
    std::vector<Sequence*> finished;
    for (const ScheduledBatch::Entry& e : batch.entries) {
      if (!e.completes()) continue;
      if (scheduler_->AppendToken(*e.seq, NextToken(e.seq->tokens), false)) {
        finished.push_back(e.seq);
      }
    }
    for (Sequence* seq : finished) done_.push_back(scheduler_->Finish(seq));
  }

  // Keeps `depth` steps in flight until every sequence finished; returns the steps' sizes.
  std::vector<size_t> RunPipelined(int depth) {
    std::vector<size_t> sizes;
    std::deque<ScheduledBatch> flights;
    for (int guard = 0; guard < 10000 && (!scheduler_->idle() || !flights.empty()); ++guard) {
      while (static_cast<int>(flights.size()) < depth) {
        ScheduledBatch batch = scheduler_->Schedule();
        if (batch.empty()) break;
        for (const ScheduledBatch& other : flights) ExpectDisjoint(batch, other);
        sizes.push_back(batch.entries.size());
        flights.push_back(std::move(batch));
      }
      if (flights.empty()) break;
      Land(flights.front());
      flights.pop_front();
    }
    EXPECT_TRUE(scheduler_->idle());
    return sizes;
  }

  static void ExpectDisjoint(const ScheduledBatch& a, const ScheduledBatch& b) {
    for (const ScheduledBatch::Entry& x : a.entries) {
      for (const ScheduledBatch::Entry& y : b.entries) {
        EXPECT_NE(x.seq, y.seq) << "request " << x.seq->request_id << " is in two steps at once";
        for (int32_t block : x.new_block_ids) {
          EXPECT_EQ(std::count(y.seq->block_ids.begin(), y.seq->block_ids.end(), block), 0)
              << "block " << block << " is given to request " << x.seq->request_id
              << " while request " << y.seq->request_id << " holds it in flight";
        }
      }
    }
  }
};

TEST_F(SchedulerInFlightTest, TwoStepsInFlightTakeDisjointHalvesAndEveryOutputIsExact) {
  Make(256, 2);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(Prompt(5 + i, 10 * i + 1));
    Add(prompts.back(), 7);
  }
  const ScheduledBatch first = scheduler_->Schedule();
  const ScheduledBatch second = scheduler_->Schedule();
  EXPECT_THAT(first.entries, SizeIs(3));
  EXPECT_THAT(second.entries, SizeIs(3));
  ExpectDisjoint(first, second);
  EXPECT_TRUE(scheduler_->Schedule().empty()) << "every sequence is in flight";
  Land(first);
  const ScheduledBatch third = scheduler_->Schedule();
  ASSERT_THAT(third.entries, SizeIs(3));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(third.entries[i].seq, first.entries[i].seq);
  Land(second);
  Land(third);

  for (size_t size : RunPipelined(2)) EXPECT_LE(size, 3u) << "no step takes more than its half";
  ASSERT_THAT(done_, SizeIs(6));
  for (const auto& seq : done_) {
    EXPECT_EQ(Output(*seq), Expected(prompts[seq->request_id - 1], 7))
        << "request " << seq->request_id;
  }
  EXPECT_EQ(pool_->num_free() + cache_->num_evictable_blocks(), pool_->num_blocks());
}

TEST_F(SchedulerInFlightTest, PreemptionWaitsForTheNewerSequenceInFlight) {
  // 4 blocks of 4: two 8-token prompts fill them; x's first decode (position 8) needs a third
  // block. y, admitted after x, is the one to preempt, but it is in flight: x neither takes its
  // blocks nor gives up its own, and waits for y to land.
  Make(4, 2);
  Sequence* x = Add(Prompt(8, 1), 3);
  Sequence* y = Add(Prompt(8, 50), 3);
  const ScheduledBatch first = scheduler_->Schedule();
  const ScheduledBatch second = scheduler_->Schedule();
  ASSERT_THAT(first.entries, SizeIs(1));
  ASSERT_THAT(second.entries, SizeIs(1));
  EXPECT_EQ(first.entries[0].seq, x);
  EXPECT_EQ(second.entries[0].seq, y);
  Land(first);
  EXPECT_TRUE(scheduler_->Schedule().empty());
  EXPECT_EQ(scheduler_->counters().num_preemptions, 0);
  EXPECT_THAT(x->block_ids, SizeIs(2)) << "x keeps its KV";
  EXPECT_THAT(y->block_ids, SizeIs(2)) << "y keeps its blocks while in flight";
  Land(second);
  const ScheduledBatch third = scheduler_->Schedule();
  ASSERT_THAT(third.entries, SizeIs(1));
  EXPECT_EQ(third.entries[0].seq, x);
  EXPECT_EQ(scheduler_->counters().num_preemptions, 1);
  ASSERT_EQ(scheduler_->num_waiting(), 1);
  EXPECT_EQ(scheduler_->waiting().front().get(), y) << "the newer one is preempted, once landed";
  Land(third);
  RunPipelined(2);
  ASSERT_THAT(done_, SizeIs(2));
  for (const auto& seq : done_) {
    const std::vector<int32_t> prompt = seq->request_id == 1 ? Prompt(8, 1) : Prompt(8, 50);
    EXPECT_EQ(Output(*seq), Expected(prompt, 3)) << "request " << seq->request_id;
  }
}

TEST_F(SchedulerInFlightTest, TheShareCountsOnlyWhatMaxNumSeqsLetsRun) {
  // 4 may run, 8 are queued: two steps of 2, not one of 4 and an empty one.
  SchedulerOptions options;
  options.steps_in_flight = 2;
  options.max_num_seqs = 4;
  SchedulerTest::Make(256, options);
  for (int i = 0; i < 8; ++i) Add(Prompt(5, 20 * i + 1), 4);
  const ScheduledBatch first = scheduler_->Schedule();
  const ScheduledBatch second = scheduler_->Schedule();
  EXPECT_THAT(first.entries, SizeIs(2));
  EXPECT_THAT(second.entries, SizeIs(2));
  Land(first);
  Land(second);
  // All 4 running, 4 queued behind them: still two halves.
  EXPECT_THAT(scheduler_->Schedule().entries, SizeIs(2));
  EXPECT_THAT(scheduler_->Schedule().entries, SizeIs(2));
}

TEST_F(SchedulerInFlightTest, ACancelledSequenceLeavesOnlyOnceItsStepLanded) {
  Make(64, 2);
  Sequence* x = Add(Prompt(6, 1), 20);
  Add(Prompt(6, 30), 20);
  const ScheduledBatch first = scheduler_->Schedule();
  ASSERT_THAT(first.entries, SizeIs(1));
  ASSERT_EQ(first.entries[0].seq, x);
  const ScheduledBatch second = scheduler_->Schedule();
  const uint64_t x_id = x->seq_id;
  x->handle->Cancel();
  const int32_t free_before = pool_->num_free();
  EXPECT_THAT(scheduler_->TakeCancelled(), IsEmpty()) << "its step still writes its blocks";
  EXPECT_EQ(pool_->num_free(), free_before);
  Land(first);
  EXPECT_THAT(scheduler_->TakeCancelled(), SizeIs(1));
  EXPECT_TRUE(scheduler_->Schedule().empty()) << "the other sequence is still in flight";
  Land(second);
  const ScheduledBatch third = scheduler_->Schedule();
  EXPECT_THAT(third.finished_seq_ids, ::testing::ElementsAre(x_id)) << "the workers drop x";
  Land(third);
}

TEST_F(SchedulerInFlightTest, AFailedStepLeavesItsSequencesFreeToRequeue) {
  Make(64, 2);
  Add(Prompt(6, 1), 5);
  Add(Prompt(6, 30), 5);
  const ScheduledBatch first = scheduler_->Schedule();
  const ScheduledBatch second = scheduler_->Schedule();
  auto every = [](const Sequence&) { return true; };
  EXPECT_THAT(scheduler_->TakeIf(every), IsEmpty()) << "both are in flight";
  scheduler_->Returned(first);
  scheduler_->Returned(second);
  scheduler_->RequeueAll();
  EXPECT_EQ(scheduler_->num_waiting(), 2);
  RunPipelined(2);
  ASSERT_THAT(done_, SizeIs(2));
  for (const auto& seq : done_) {
    const std::vector<int32_t> prompt = seq->request_id == 1 ? Prompt(6, 1) : Prompt(6, 30);
    EXPECT_EQ(Output(*seq), Expected(prompt, 5)) << "request " << seq->request_id;
  }
}

}  // namespace
}  // namespace tpserve::testing
