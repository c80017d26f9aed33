// Scheduler scenarios with a fake executor: each step "runs" by committing the batch and
// appending a token that is a function of the whole context (so a recomputed sequence continues
// exactly as before), the way the engine does with rank 0's outputs.
#include "coordinator/scheduler.h"

#include <map>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/coordinator/bundled_model.h"
#include "tests/unit/coordinator/scheduler_fixture.h"

namespace tpserve::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

TEST_F(SchedulerTest, TokenBudgetHoldsEveryStepAndEveryRequestCompletes) {
  SchedulerOptions options;
  options.max_num_batched_tokens = 24;
  Make(256, options);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) {
    prompts.push_back(Prompt(5 + 7 * i, 1000 * (i + 1)));
    Add(prompts.back(), 3 + i % 5);
  }
  int steps = 0;
  while (!scheduler_->idle()) {
    const StepRecord r = Step();
    int32_t tokens = 0;
    for (const auto& [id, start, n] : r.entries) tokens += n;
    EXPECT_LE(tokens, 24) << "step " << steps;
    ASSERT_LT(++steps, 1000);
  }
  ASSERT_EQ(done_.size(), 12u);
  for (int i = 0; i < 12; ++i) {
    const Sequence* seq = Done(i + 1);
    ASSERT_NE(seq, nullptr);
    EXPECT_EQ(Output(*seq), Expected(prompts[i], 3 + i % 5)) << "request " << i + 1;
  }
  ExpectNothingHeld();
}

TEST_F(SchedulerTest, LongPrefillIsChunkedWhileDecodesAdvanceEveryStep) {
  SchedulerOptions options;
  options.max_num_batched_tokens = 8;
  Make(64, options, /*prefix_cache=*/false);
  Add(Prompt(3), 20);  // request 1: decodes from its second step
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(1, 0, 3)));
  Add(Prompt(30, 500), 2);  // request 2: a 30-token prompt, 7 tokens per step beside the decode
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(1, 3, 1), std::make_tuple(2, 0, 7)));
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(1, 4, 1), std::make_tuple(2, 7, 7)));
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(1, 5, 1), std::make_tuple(2, 14, 7)));
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(1, 6, 1), std::make_tuple(2, 21, 7)));
  // The last chunk (2 tokens) samples request 2's first token; then both decode.
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(1, 7, 1), std::make_tuple(2, 28, 2)));
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(1, 8, 1), std::make_tuple(2, 30, 1)));
  ASSERT_NE(Done(2), nullptr);
  EXPECT_EQ(Output(*Done(2)), Expected(Prompt(30, 500), 2));
  RunToCompletion();
  EXPECT_EQ(Output(*Done(1)), Expected(Prompt(3), 20));
}

TEST_F(SchedulerTest, AttentionBudgetShortensChunksAsTheContextGrows) {
  SchedulerOptions options;
  options.max_num_batched_tokens = 64;
  options.max_step_attention = 1024;  // a 32-token chunk from position 0
  Make(64, options, /*prefix_cache=*/false);
  Add(Prompt(100), 1);
  std::vector<std::tuple<uint64_t, int32_t, int32_t>> steps;
  while (!scheduler_->idle()) {
    const StepRecord r = Step();
    ASSERT_EQ(r.entries.size(), 1u);
    const auto [id, start, n] = r.entries[0];
    EXPECT_LE(StepAttention(start, n), 1024) << "start " << start;
    steps.push_back(r.entries[0]);
    ASSERT_LT(steps.size(), 100u);
  }
  // Each chunk is the longest n with n × (start + n) <= 1024; the last token is a decode.
  EXPECT_THAT(steps, ElementsAre(std::make_tuple(1, 0, 32), std::make_tuple(1, 32, 19),
                                 std::make_tuple(1, 51, 15), std::make_tuple(1, 66, 12),
                                 std::make_tuple(1, 78, 11), std::make_tuple(1, 89, 10),
                                 std::make_tuple(1, 99, 1)));
  EXPECT_EQ(Output(*Done(1)), Expected(Prompt(100), 1));
}

TEST_F(SchedulerTest, DecodesRunEveryStepWhileALongPromptIsChunkedWithinTheAttentionBudget) {
  SchedulerOptions options;
  options.max_num_batched_tokens = 16;
  options.max_step_attention = 512;
  Make(128, options, /*prefix_cache=*/false);
  for (int i = 0; i < 3; ++i) Add(Prompt(2, 100 * (i + 1)), 60);
  EXPECT_EQ(Step().entries.size(), 3u);
  const std::vector<int32_t> long_prompt = Prompt(200, 1000);
  Sequence* long_seq = Add(long_prompt, 1);
  int steps = 0;
  while (Done(long_seq->request_id) == nullptr) {
    const StepRecord r = Step();
    int64_t attention = 0;
    int32_t long_chunk = 0;
    std::vector<uint64_t> decoded;
    for (const auto& [id, start, n] : r.entries) {
      attention += StepAttention(start, n);
      if (id == long_seq->request_id) {
        long_chunk = n;
      } else {
        EXPECT_EQ(n, 1);
        decoded.push_back(id);
      }
    }
    EXPECT_THAT(decoded, ElementsAre(1, 2, 3)) << "step " << steps;
    ASSERT_GT(long_chunk, 0) << "step " << steps;
    // Past the budget only by the one block the first prefill chunk always gets.
    if (long_chunk > options.block_size) {
      EXPECT_LE(attention, 512) << "step " << steps;
    }
    ASSERT_LT(++steps, 200);
  }
  EXPECT_GT(steps, 200 / 16) << "the attention budget, not the token budget, sets the chunks";
  EXPECT_EQ(Output(*Done(long_seq->request_id)), Expected(long_prompt, 1));
  RunToCompletion();
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(Output(*Done(i + 1)), Expected(Prompt(2, 100 * (i + 1)), 60));
}

TEST_F(SchedulerTest, FirstPrefillChunkGetsABlockWhenDecodesTakeTheWholeAttentionBudget) {
  SchedulerOptions options;
  options.max_num_batched_tokens = 64;
  options.max_step_attention = 16;  // less than the two decodes' contexts
  Make(128, options, /*prefix_cache=*/false);
  Sequence* a = Add(Prompt(20, 100), 10);
  Sequence* b = Add(Prompt(20, 200), 10);
  for (int steps = 0; a->num_computed < a->prompt_len || b->num_computed < b->prompt_len;) {
    Step();
    ASSERT_LT(++steps, 20);
  }
  Sequence* late = Add(Prompt(12, 500), 1);
  // Both decodes run; the prompt advances one block (4 tokens) a step; a second prompt waits.
  Sequence* later = Add(Prompt(12, 700), 1);
  for (int32_t start : {0, 4, 8}) {
    const StepRecord r = Step();
    ASSERT_EQ(r.entries.size(), 3u);
    EXPECT_EQ(std::get<2>(r.entries[0]), 1);
    EXPECT_EQ(std::get<2>(r.entries[1]), 1);
    EXPECT_EQ(r.entries[2], std::make_tuple(late->request_id, start, 4));
  }
  EXPECT_EQ(later->num_computed, 0);
  RunToCompletion();
  EXPECT_EQ(done_.size(), 4u);
}

TEST_F(SchedulerTest, MaxNumSeqsCapsTheRunningSet) {
  SchedulerOptions options;
  options.max_num_seqs = 2;
  Make(64, options);
  for (int i = 0; i < 3; ++i) Add(Prompt(4, 100 * (i + 1)), 5);
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(1, 0, 4), std::make_tuple(2, 0, 4)));
  EXPECT_EQ(scheduler_->num_waiting(), 1);
  RunToCompletion();
  EXPECT_EQ(done_.size(), 3u);
}

TEST_F(SchedulerTest, OutOfBlocksPreemptsTheNewestAndItCompletesLaterWithTheSameText) {
  SchedulerOptions options;
  Make(/*num_blocks=*/6, options, /*prefix_cache=*/false);  // 24 tokens in all
  const std::vector<int32_t> a = Prompt(7, 10), b = Prompt(7, 50);
  Add(a, 9);  // 16 tokens: 4 blocks at the end
  Add(b, 9);
  const StepRecord first = Step();
  EXPECT_THAT(first.entries, ElementsAre(std::make_tuple(1, 0, 7), std::make_tuple(2, 0, 7)));
  int steps = 1;
  bool preempted_b = false;
  while (!scheduler_->idle()) {
    const StepRecord r = Step();
    for (const auto& [id, start, n] : r.entries) {
      // After preemption request 2 restarts from position 0 (no prefix cache): a recompute.
      if (id == 2 && start == 0) preempted_b = true;
    }
    ASSERT_LT(++steps, 200);
  }
  EXPECT_TRUE(preempted_b);
  EXPECT_GE(scheduler_->counters().num_preemptions, 1);
  EXPECT_EQ(Output(*Done(1)), Expected(a, 9));
  EXPECT_EQ(Output(*Done(2)), Expected(b, 9));
  EXPECT_EQ(pool_->num_free(), 6);
}

TEST_F(SchedulerTest, PreemptedSequenceIsDroppedOnTheWorkersAndComesBackUnderANewId) {
  SchedulerOptions options;
  Make(/*num_blocks=*/4, options, /*prefix_cache=*/false);
  Sequence* a = Add(Prompt(6, 10), 8);
  Sequence* b = Add(Prompt(6, 50), 8);
  Step();  // both admitted: 2 blocks each, positions 0-5
  const uint64_t b_id = b->seq_id;
  Step();  // position 6
  Step();  // position 7
  // a needs a third block for position 8; the pool is empty: b (the newest) is preempted.
  const StepRecord r = Step();
  EXPECT_THAT(r.entries, ElementsAre(std::make_tuple(a->request_id, 8, 1)));
  EXPECT_THAT(r.finished_seq_ids, ElementsAre(b_id));
  EXPECT_EQ(scheduler_->counters().num_preemptions, 1);
  RunToCompletion();
  EXPECT_EQ(done_.size(), 2u);
  EXPECT_NE(Done(2)->seq_id, b_id);
  EXPECT_EQ(Output(*Done(2)), Expected(Prompt(6, 50), 8));
}

TEST_F(SchedulerTest, CancellationFreesBlocksAtTheNextStep) {
  SchedulerOptions options;
  Make(16, options, /*prefix_cache=*/false);
  Sequence* a = Add(Prompt(10), 100);
  Add(Prompt(5, 300), 100);
  Step();
  Step();
  EXPECT_EQ(pool_->num_free(), 16 - 3 - 2);
  const uint64_t a_seq = a->seq_id;
  a->handle->Cancel();
  std::vector<std::unique_ptr<Sequence>> cancelled = scheduler_->TakeCancelled();
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0]->request_id, 1u);
  EXPECT_EQ(pool_->num_free(), 16 - 2);
  const StepRecord r = Step();
  EXPECT_THAT(r.entries, ElementsAre(std::make_tuple(2, 6, 1)));
  EXPECT_THAT(r.finished_seq_ids, ElementsAre(a_seq));
}

TEST_F(SchedulerTest, CancelledWaitingRequestNeverRuns) {
  SchedulerOptions options;
  options.max_num_seqs = 1;
  Make(16, options);
  Add(Prompt(4), 3);
  Sequence* b = Add(Prompt(4, 40), 3);
  Step();
  b->handle->Cancel();
  EXPECT_EQ(scheduler_->TakeCancelled().size(), 1u);
  RunToCompletion();
  EXPECT_EQ(done_.size(), 1u);
}

TEST_F(SchedulerTest, SharedPrefixStartsAfterTheCachedBlocksAndReusesTheirIds) {
  SchedulerOptions options;
  Make(32, options);
  std::vector<int32_t> shared = Prompt(10, 7);
  std::vector<int32_t> first = shared, second = shared;
  first.push_back(900);
  second.push_back(901);
  Sequence* a = Add(first, 2);
  Step();
  // a's 11 tokens: blocks 0, 1 (full, now cached) and 2.
  EXPECT_THAT(a->block_ids, ElementsAre(0, 1, 2));
  Sequence* b = Add(second, 2);
  ScheduledBatch batch = scheduler_->Schedule();
  ASSERT_EQ(batch.entries.size(), 2u);
  const ScheduledBatch::Entry& eb = batch.entries[1];
  EXPECT_EQ(eb.seq, b);
  EXPECT_TRUE(eb.is_new);
  EXPECT_EQ(eb.start, 8);       // two cached blocks of 4
  EXPECT_EQ(eb.num_tokens, 3);  // 10, 11 and the distinct last token
  EXPECT_THAT(eb.new_block_ids, ElementsAre(0, 1, 3));
  EXPECT_EQ(b->cached_prompt_tokens, 8);
  EXPECT_EQ(pool_->ref_count(0), 3);  // the tree, a and b
  scheduler_->Commit(batch);
}

TEST_F(SchedulerTest, WholePromptCachedStillComputesTheLastToken) {
  SchedulerOptions options;
  Make(32, options);
  Add(Prompt(8), 1);
  RunToCompletion();
  Sequence* b = Add(Prompt(8), 1);
  const StepRecord r = Step();
  // 8 tokens = 2 blocks, but only the first 7 may come from the cache: block 0 matches.
  EXPECT_THAT(r.entries, ElementsAre(std::make_tuple(b->request_id, 4, 4)));
  EXPECT_EQ(Output(*Done(2)), Expected(Prompt(8), 1));
}

TEST_F(SchedulerTest, PreemptedSequenceRecomputesFromItsCachedBlocks) {
  SchedulerOptions options;
  Make(/*num_blocks=*/5, options);
  Add(Prompt(8, 10), 8);
  Add(Prompt(8, 60), 8);
  RunToCompletion();
  EXPECT_GE(scheduler_->counters().num_preemptions, 1);
  EXPECT_EQ(Output(*Done(1)), Expected(Prompt(8, 10), 8));
  EXPECT_EQ(Output(*Done(2)), Expected(Prompt(8, 60), 8));
  ExpectNothingHeld();
}

TEST_F(SchedulerTest, LaterSamplesWaitForTheFirstSamplesPromptAndShareItsBlocks) {
  SchedulerOptions options;
  options.max_num_batched_tokens = 8;
  Make(64, options);
  auto group = std::make_shared<SampleGroup>();
  Sequence* first = Add(Prompt(13), 3);
  first->group = group;
  first->group_leader = true;
  Sequence* second = Add(Prompt(13), 3);
  second->group = group;
  Add(Prompt(4, 500), 3);  // another request
  // The second sample is passed over while the first computes the prompt; request 3 is not.
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(1, 0, 8)));
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(1, 8, 5), std::make_tuple(3, 0, 3)));
  EXPECT_TRUE(group->prompt_cached);
  const StepRecord r = Step();
  EXPECT_THAT(r.entries, ElementsAre(std::make_tuple(1, 13, 1), std::make_tuple(3, 3, 1),
                                     std::make_tuple(2, 12, 1)));
  EXPECT_EQ(second->cached_prompt_tokens, 12);
  EXPECT_THAT(absl::MakeConstSpan(second->block_ids).first(3),
              ElementsAreArray(absl::MakeConstSpan(first->block_ids).first(3)));
  RunToCompletion();
  EXPECT_EQ(done_.size(), 3u);
}

TEST_F(SchedulerTest, ScoreIsChunkedByLogitRowsAndNeverUsesTheCache) {
  SchedulerOptions options;
  options.max_logit_rows = 5;
  Make(32, options);
  Add(Prompt(12), 1);
  RunToCompletion();
  Add(Prompt(12), 0, Sequence::Kind::kScore);
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(2, 0, 5)));
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(2, 5, 5)));
  EXPECT_THAT(Step().entries, ElementsAre(std::make_tuple(2, 10, 2)));
  EXPECT_TRUE(scheduler_->idle());
}

TEST_F(SchedulerTest, StopConditions) {
  SchedulerOptions options;
  Make(32, options);
  Sequence* seq = Add(Prompt(3), 6);
  seq->params.stop_token_ids = {77};
  Step();  // samples the first token
  EXPECT_EQ(scheduler_->AppendToken(*seq, 5, false), std::nullopt);
  EXPECT_EQ(scheduler_->AppendToken(*seq, 6, true), FinishReason::kStop);
  seq->params.ignore_eos = true;
  EXPECT_EQ(scheduler_->AppendToken(*seq, 6, true), std::nullopt);
  EXPECT_EQ(scheduler_->AppendToken(*seq, 77, false), FinishReason::kStop);
  EXPECT_EQ(scheduler_->AppendToken(*seq, 8, false), FinishReason::kLength);  // the 6th token
}

TEST_F(SchedulerTest, TakeAllReleasesEveryBlock) {
  SchedulerOptions options;
  Make(32, options);
  Add(Prompt(9), 10);
  Add(Prompt(9, 40), 10);
  Step();
  Add(Prompt(5, 90), 10);
  EXPECT_EQ(scheduler_->TakeAll().size(), 3u);
  ExpectNothingHeld();
  EXPECT_THAT(scheduler_->Schedule().finished_seq_ids, IsEmpty());
}

// Speculative decoding through Postprocess, with a fake rank 0 that verifies greedily against
// CycleToken (accepting proposals while they equal the true next token, then adding that token)
// and a shadow of the KV pool: what each step writes at each block slot, proposals included.
class SpeculativeSchedulerTest : public SchedulerTest {
 protected:
  // Mostly the token three back, so that n-gram proposals come and are often right; a quarter
  // of the time (by a hash of the context) another token, so that many are rejected.
  static int32_t CycleToken(const std::vector<int32_t>& context) {
    const int32_t hashed = NextToken(context);
    if (context.size() < 3 || hashed % 4 == 0) return hashed;
    return context[context.size() - 3];
  }

  void Step() {
    ScheduledBatch batch = scheduler_->Schedule();
    StepOutputs outputs;
    for (uint64_t id : batch.finished_seq_ids) tables_.erase(id);
    for (const auto& e : batch.entries) {
      Sequence& seq = *e.seq;
      // The workers' block table, kept as they keep it: it must be the scheduler's.
      std::vector<int32_t>& table = tables_[seq.seq_id];
      if (e.is_new) table.clear();
      if (e.kept_blocks >= 0) {
        EXPECT_LE(e.kept_blocks, static_cast<int32_t>(table.size()));
        EXPECT_GE(e.kept_blocks * kBlock, e.start);
        table.resize(e.kept_blocks);
        ++trimmed_;
      }
      table.insert(table.end(), e.new_block_ids.begin(), e.new_block_ids.end());
      EXPECT_EQ(table, seq.block_ids) << "sequence " << seq.seq_id;
      std::vector<int32_t> run(seq.tokens.begin() + e.start,
                               seq.tokens.begin() + e.start + e.num_tokens);
      run.insert(run.end(), e.drafts.begin(), e.drafts.end());
      for (size_t i = 0; i < run.size(); ++i) {
        const int32_t position = e.start + static_cast<int32_t>(i);
        const int32_t block = table[position / kBlock];
        shadow_[block].resize(kBlock, -1);
        shadow_[block][position % kBlock] = run[i];
      }
      if (!e.completes()) continue;
      SequenceStepOutput* out = &outputs.sequences.emplace_back();
      out->seq_id = seq.seq_id;
      std::vector<int32_t> context = seq.tokens;
      for (int32_t draft : e.drafts) {
        if (draft != CycleToken(context)) break;
        out->token_ids.push_back(draft);
        context.push_back(draft);
      }
      out->token_ids.push_back(CycleToken(context));
      context.push_back(out->token_ids.back());
      proposed_ += static_cast<int64_t>(e.drafts.size());
      if (!e.drafts.empty()) verified_runs_.push_back(static_cast<int32_t>(e.drafts.size()));
      // A draft model's proposals (the pure cycle, which CycleToken leaves a quarter of the
      // time), at positions the block table must cover.
      const int32_t run_end = e.start + static_cast<int32_t>(run.size());
      EXPECT_GE(static_cast<int32_t>(seq.block_ids.size()) * kBlock, run_end + e.num_proposals);
      EXPECT_LE(e.num_proposals, 3);
      for (int32_t k = 0; k < e.num_proposals; ++k) {
        const int32_t proposal = context[context.size() - 3] + (wrong_proposals_ ? 1 : 0);
        out->proposal_token_ids.push_back(proposal);
        context.push_back(proposal);
      }
      asked_ += e.num_proposals;
    }
    absl::flat_hash_set<const Sequence*> finished;
    for (SequenceUpdate& update : scheduler_->Postprocess(batch, outputs)) {
      EXPECT_TRUE(update.error.ok()) << update.error;
      if (update.finished == nullptr) continue;
      finished.insert(update.finished.get());
      done_.push_back(std::move(update.finished));
    }
    // A sequence holds no block that only rejected proposals reached: the next step runs its
    // tokens not yet computed and the draft's proposals, nothing beyond.
    for (const auto& e : batch.entries) {
      const Sequence& seq = *e.seq;
      if (finished.contains(&seq) || (e.drafts.empty() && e.num_proposals == 0)) continue;
      const size_t next = seq.tokens.size() + seq.proposals.size();
      EXPECT_LE(seq.block_ids.size(), (next + kBlock - 1) / kBlock) << "sequence " << seq.seq_id;
    }
  }

  // Requests 1.. were `prompts` (in order) for `max_tokens` each: each output is what decoding
  // one token at a time gives, the cache holds exactly what was computed, and nothing is held.
  void ExpectLosslessAndCached(const std::vector<std::vector<int32_t>>& prompts,
                               int32_t max_tokens) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::vector<int32_t> expected = Expected(prompts[i], max_tokens, CycleToken);
      ASSERT_NE(Done(i + 1), nullptr);
      EXPECT_EQ(Output(*Done(i + 1)), expected) << "request " << i + 1;
      std::vector<int32_t> all = prompts[i];
      all.insert(all.end(), expected.begin(), expected.end());
      ExpectCacheHolds(all);
    }
    ExpectNothingHeld();
  }

  // The cached blocks of `tokens` hold exactly those tokens' K/V: none holds a rejected one.
  void ExpectCacheHolds(const std::vector<int32_t>& tokens) {
    const PrefixCache::MatchResult match = cache_->Match(tokens);
    for (size_t b = 0; b < match.block_ids.size(); ++b) {
      for (int32_t slot = 0; slot < kBlock; ++slot) {
        EXPECT_EQ(shadow_[match.block_ids[b]][slot], tokens[b * kBlock + slot])
            << "block " << match.block_ids[b] << " slot " << slot;
      }
    }
  }

  // Up to 3 proposals from suffixes of 1 to 3 tokens, in a 64-block pool.
  void SetUp() override {
    SchedulerOptions options;
    options.num_speculative_tokens = 3;
    options.ngram = {1, 3};
    options.vocab_size = 1000;
    Make(64, options);
  }

  // Up to 3 proposals from rank 0's draft model.
  static SchedulerOptions DraftModelOptions() {
    SchedulerOptions options;
    options.num_speculative_tokens = 3;
    options.draft_model = true;
    options.vocab_size = 1000;
    return options;
  }

  static constexpr int32_t kBlock = 4;
  std::map<int32_t, std::vector<int32_t>> shadow_;
  std::map<uint64_t, std::vector<int32_t>> tables_;  // the workers' block tables by seq_id
  int64_t trimmed_ = 0;  // steps that cut a sequence's table (blocks of rejected proposals freed)
  int64_t proposed_ = 0;
  int64_t asked_ = 0;                   // proposals a draft model was asked for
  std::vector<int32_t> verified_runs_;  // proposals verified, per sequence and step
  bool wrong_proposals_ = false;        // the draft proposes what CycleToken seldom picks
};

TEST_F(SpeculativeSchedulerTest, RejectedProposalsAreRolledBackAndNeverCached) {
  // Prompts that repeat themselves, continued mostly (not always) in their cycle.
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> prompt;
    for (int r = 0; r < 4; ++r) {
      for (int t = 0; t < 3; ++t) prompt.push_back(200 + 10 * i + t);
    }
    prompts.push_back(prompt);
    Add(prompt, 24);
  }
  for (int steps = 0; !scheduler_->idle(); ++steps) {
    ASSERT_LT(steps, 1000);
    Step();
  }
  EXPECT_GT(proposed_, 20);
  EXPECT_GT(trimmed_, 0);
  const SchedulerCounters& counters = scheduler_->counters();
  EXPECT_EQ(counters.spec_draft_tokens, proposed_);
  EXPECT_GT(counters.spec_accepted_tokens, 0);
  EXPECT_LT(counters.spec_accepted_tokens, counters.spec_draft_tokens);
  ExpectLosslessAndCached(prompts, 24);
}

TEST_F(SpeculativeSchedulerTest, DraftModelProposalsAreVerifiedNextStep) {
  SchedulerOptions options = DraftModelOptions();
  Make(64, options);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back({300 + i, 310 + i, 320 + i, 300 + i, 310 + i});
    Add(prompts.back(), 20);
  }
  for (int steps = 0; !scheduler_->idle(); ++steps) {
    ASSERT_LT(steps, 1000);
    Step();
  }
  // Every sampling step asked for proposals, and each was sent back to be verified.
  EXPECT_GT(asked_, 20);
  EXPECT_GT(proposed_, 20);
  EXPECT_LE(proposed_, asked_);
  const SchedulerCounters& counters = scheduler_->counters();
  EXPECT_GT(counters.spec_accepted_tokens, 0);
  EXPECT_LT(counters.spec_accepted_tokens, counters.spec_draft_tokens);
  ExpectLosslessAndCached(prompts, 20);
}

TEST_F(SpeculativeSchedulerTest, DraftModelIsNotAskedToCatchUp) {
  SchedulerOptions options = DraftModelOptions();
  options.spec_disable_batch_size = 2;
  Make(64, options);
  // Four at once is more than speculate: no proposals, and the long one, once alone, is not
  // asked either, since its draft would have to run its whole context first.
  for (int i = 0; i < 3; ++i) Add({300 + i, 310 + i, 320 + i}, 4);
  Add({400, 410, 420}, 30);
  while (!scheduler_->idle()) Step();
  EXPECT_EQ(asked_, 0);
  ASSERT_NE(Done(4), nullptr);
  EXPECT_EQ(Output(*Done(4)), Expected({400, 410, 420}, 30, CycleToken));
  // A request that arrives alone is followed by the draft from its first sample.
  Add({500, 510, 520}, 20);
  while (!scheduler_->idle()) Step();
  EXPECT_GT(asked_, 10);  // about 3 in every step but the last few
  ASSERT_NE(Done(5), nullptr);
  EXPECT_EQ(Output(*Done(5)), Expected({500, 510, 520}, 20, CycleToken));
  ExpectNothingHeld();
}

TEST_F(SpeculativeSchedulerTest, RejectedProposalsShrinkKThenStopIt) {
  SchedulerOptions options = DraftModelOptions();
  options.spec_min_acceptance = 0.2;
  Make(64, options);
  wrong_proposals_ = true;
  Add({300, 310, 320}, 60);
  while (!scheduler_->idle()) Step();
  ASSERT_GE(verified_runs_.size(), 4u);
  EXPECT_EQ(std::vector<int32_t>(verified_runs_.begin(), verified_runs_.begin() + 4),
            (std::vector<int32_t>{3, 2, 1, 1}));
  // Judged after 16 proposed tokens, then no more proposals.
  EXPECT_GE(proposed_, kSpecJudgedAfter);
  EXPECT_LT(proposed_, kSpecJudgedAfter + 3);
  ASSERT_NE(Done(1), nullptr);
  EXPECT_EQ(Output(*Done(1)), Expected({300, 310, 320}, 60, CycleToken));
  ExpectNothingHeld();
}

TEST_F(SpeculativeSchedulerTest, AcceptedProposalsKeepKAtItsMost) {
  SchedulerOptions options = DraftModelOptions();
  Make(64, options);
  Add({300, 310, 320}, 40);
  while (!scheduler_->idle()) Step();
  // A rejection takes one off; the next run accepted in full puts it back.
  for (size_t i = 1; i < verified_runs_.size(); ++i) {
    EXPECT_LE(verified_runs_[i], std::min(verified_runs_[i - 1] + 1, 3)) << i;
  }
  EXPECT_GT(std::count(verified_runs_.begin(), verified_runs_.end(), 3), 2);
  ASSERT_NE(Done(1), nullptr);
  EXPECT_EQ(Output(*Done(1)), Expected({300, 310, 320}, 40, CycleToken));
}

TEST_F(SpeculativeSchedulerTest, ARequestMayDecline) {
  Add({7, 8, 9, 7, 8, 9, 7, 8}, 8)->params.speculate = false;
  while (!scheduler_->idle()) Step();
  EXPECT_EQ(proposed_, 0);
  ASSERT_NE(Done(1), nullptr);
  EXPECT_EQ(Output(*Done(1)), Expected({7, 8, 9, 7, 8, 9, 7, 8}, 8, CycleToken));
}

// Two steps in flight (two pipeline stages): steps are planned before the earlier ones land, and

}  // namespace
}  // namespace tpserve::testing
