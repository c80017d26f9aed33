// The scheduler's test fixture: a fake executor whose every step "runs" by committing the batch
// and appending a token that is a function of the whole context (so a recomputed sequence
// continues exactly as before), the way the engine does with rank 0's outputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <tuple>
#include <vector>

#include "coordinator/radix_cache.h"
#include "coordinator/scheduler.h"
#include "gtest/gtest.h"

namespace tpserve::testing {

inline int32_t NextToken(const std::vector<int32_t>& context) {
  int64_t h = static_cast<int64_t>(context.size());
  for (int32_t t : context) h = (h * 31 + t) % 1000003;
  return static_cast<int32_t>(100 + h % 900);
}

inline std::vector<int32_t> Prompt(int n, int32_t first = 1) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), first);
  return p;
}

struct StepRecord {
  std::vector<std::tuple<uint64_t, int32_t, int32_t>> entries;  // request id, start, tokens
  std::vector<uint64_t> finished_seq_ids;
};

class SchedulerTest : public ::testing::Test {
 protected:
  void Make(int32_t num_blocks, SchedulerOptions options, bool prefix_cache = true) {
    options.block_size = 4;
    options.context_length = 4096;
    pool_ = std::make_unique<BlockPool>(num_blocks);
    if (prefix_cache) {
      cache_ = std::make_unique<RadixCache>(options.block_size, pool_.get());
    } else {
      cache_ = std::make_unique<NoPrefixCache>();
    }
    scheduler_ = std::make_unique<Scheduler>(options, pool_.get(), cache_.get());
  }

  Sequence* Add(std::vector<int32_t> prompt, int32_t max_tokens,
                Sequence::Kind kind = Sequence::Kind::kGenerate) {
    auto seq = std::make_unique<Sequence>();
    seq->request_id = next_request_id_++;
    seq->kind = kind;
    seq->prompt_len = static_cast<int32_t>(prompt.size());
    seq->tokens = std::move(prompt);
    seq->params.max_tokens = max_tokens;
    seq->handle = std::make_shared<RequestHandle>(seq->request_id, 1);
    Sequence* raw = seq.get();
    scheduler_->Add(std::move(seq));
    return raw;
  }

  // Plans and "runs" one step; finished sequences move to done_.
  StepRecord Step() {
    ScheduledBatch batch = scheduler_->Schedule();
    StepRecord record;
    for (const auto& e : batch.entries) {
      record.entries.emplace_back(e.seq->request_id, e.start, e.num_tokens);
    }
    record.finished_seq_ids = batch.finished_seq_ids;
    EXPECT_LE(batch.num_tokens(), scheduler_->options().max_num_batched_tokens);
    scheduler_->Commit(batch);
    std::vector<Sequence*> finished;
    for (const auto& e : batch.entries) {
      Sequence& seq = *e.seq;
      if (seq.kind == Sequence::Kind::kScore) {
        if (seq.num_computed == static_cast<int32_t>(seq.tokens.size())) finished.push_back(&seq);
        continue;
      }
      if (!e.completes()) continue;
      if (scheduler_->AppendToken(seq, NextToken(seq.tokens), false)) finished.push_back(&seq);
    }
    for (Sequence* seq : finished) done_.push_back(scheduler_->Finish(seq));
    return record;
  }

  // Runs steps until the scheduler is idle; returns how many.
  int RunToCompletion(int max_steps = 10000) {
    int steps = 0;
    while (!scheduler_->idle() && steps < max_steps) {
      Step();
      ++steps;
    }
    EXPECT_TRUE(scheduler_->idle());
    return steps;
  }

  // What decoding one token at a time gives: `next` of the context, appended, n times.
  static std::vector<int32_t> Expected(std::vector<int32_t> context, int n,
                                       int32_t (*next)(const std::vector<int32_t>&) = NextToken) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      out.push_back(next(context));
      context.push_back(out.back());
    }
    return out;
  }
  static std::vector<int32_t> Output(const Sequence& seq) {
    return {seq.tokens.begin() + seq.prompt_len, seq.tokens.end()};
  }
  const Sequence* Done(uint64_t request_id) const {
    for (const auto& seq : done_) {
      if (seq->request_id == request_id) return seq.get();
    }
    return nullptr;
  }
  // Every block is free, or held only by the cache (no sequence holds any).
  void ExpectNothingHeld() const {
    const int32_t evictable = cache_->num_evictable_blocks();
    EXPECT_EQ(pool_->num_free() + evictable, pool_->num_blocks());
  }

  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<PrefixCache> cache_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Sequence>> done_;
  uint64_t next_request_id_ = 1;
};

}  // namespace tpserve::testing
