// The work the engine thread does between two steps, which must stay well under a step's compute
// time:
//   - BM_ScheduleDecodeStep: planning one step (Scheduler::Schedule) with 1,024 running requests
//     and a prefix tree of 100,000 cached blocks (issue target: < 1 ms). Each iteration times
//     Schedule() alone; committing the step and appending a token per request (so that every
//     16th step needs a new block) happen with the timer paused.
//   - BM_PostprocessDecodeStep/N: applying rank 0's reply to a decode step of N requests
//     (Scheduler::Postprocess: commit, one token each through the bundled model's detokenizer and
//     two stop strings, OutputProcessor). Planning and building the reply happen with the timer
//     paused.
//
//   tpserve-bench-scheduler [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "common/check.h"
#include "coordinator/block_pool.h"
#include "coordinator/output_processor.h"
#include "coordinator/radix_cache.h"
#include "coordinator/scheduler.h"
#include "model/gguf_file.h"
#include "model/tokenizer.h"

namespace tpserve {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kTreeBlocks = 100000;
constexpr int32_t kRunning = 1024;
constexpr int32_t kPromptTokens = 256;

std::vector<int32_t> RandomTokens(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int32_t> token(0, 49151);
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = token(rng);
  return out;
}

struct Setup {
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<RadixCache> cache;
  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::unique_ptr<Sequence>> finished;

  // Runs one step with a fake executor: commit, then one new token per completed sequence.
  void Apply(const ScheduledBatch& batch) {
    scheduler->Commit(batch);
    for (const ScheduledBatch::Entry& e : batch.entries) {
      if (!e.completes()) continue;
      const bool done =
          scheduler->AppendToken(*e.seq, static_cast<int32_t>(e.seq->tokens.size() % 49152), false)
              .has_value();
      TP_CHECK(!done);
    }
  }
};

Setup MakeSetup() {
  Setup s;
  std::mt19937 rng(7);
  const int32_t running_blocks = kRunning * 64;  // room for prompts and 700 decode steps each
  s.pool = std::make_unique<BlockPool>(kTreeBlocks + running_blocks);
  s.cache = std::make_unique<RadixCache>(kBlockSize, s.pool.get());
  // 400 cached prompts of 250 blocks each: the tree other requests left behind.
  for (int p = 0; p < kTreeBlocks / 250; ++p) {
    const std::vector<int32_t> tokens = RandomTokens(rng, 250 * kBlockSize);
    std::optional<std::vector<int32_t>> blocks = s.pool->Allocate(250);
    TP_CHECK(blocks.has_value());
    s.cache->Insert(tokens, *blocks);
    s.pool->Release(*blocks);
  }
  TP_CHECK(s.cache->num_cached_blocks() == kTreeBlocks);

  SchedulerOptions options;
  options.block_size = kBlockSize;
  options.max_num_seqs = kRunning;
  options.max_num_batched_tokens = 16384;
  options.context_length = 1 << 20;
  s.scheduler = std::make_unique<Scheduler>(options, s.pool.get(), s.cache.get());
  for (int i = 0; i < kRunning; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->request_id = i + 1;
    seq->tokens = RandomTokens(rng, kPromptTokens);
    seq->prompt_len = kPromptTokens;
    s.scheduler->Add(std::move(seq));
  }
  // Prefill everything, so that every request decodes from here on.
  while (s.scheduler->num_waiting() > 0) s.Apply(s.scheduler->Schedule());
  s.Apply(s.scheduler->Schedule());
  TP_CHECK(s.scheduler->num_running() == kRunning);
  return s;
}

void BM_ScheduleDecodeStep(benchmark::State& state) {
  Setup s = MakeSetup();
  for (auto _ : state) {
    ScheduledBatch batch = s.scheduler->Schedule();
    benchmark::DoNotOptimize(batch.entries.data());
    state.PauseTiming();
    TP_CHECK(static_cast<int32_t>(batch.entries.size()) == kRunning);
    s.Apply(batch);
    state.ResumeTiming();
  }
  state.counters["running"] = kRunning;
  state.counters["tree_blocks"] = s.cache->num_cached_blocks();
}
// 640 steps: every request needs 40 new blocks, so allocation is part of what is timed.
BENCHMARK(BM_ScheduleDecodeStep)->Iterations(640)->Unit(benchmark::kMicrosecond);

void BM_PostprocessDecodeStep(benchmark::State& state) {
  const int32_t running = static_cast<int32_t>(state.range(0));
  auto file = GgufFile::Open(TPSERVE_MODEL_PATH);
  TP_CHECK_MSG(file.ok(), "the bundled model is missing: run scripts/fetch-model.sh");
  auto tokenizer = Tokenizer::FromGguf(**file);
  TP_CHECK(tokenizer.ok());
  BlockPool pool(running * 64);
  RadixCache cache(kBlockSize, &pool);
  SchedulerOptions options;
  options.block_size = kBlockSize;
  options.max_num_seqs = running;
  options.context_length = 1 << 20;
  options.vocab_size = (*tokenizer)->vocab_size();
  Scheduler scheduler(options, &pool, &cache);
  std::mt19937 rng(11);
  for (int i = 0; i < running; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->request_id = i + 1;
    seq->tokens = RandomTokens(rng, 32);
    seq->prompt_len = 32;
    seq->params.ignore_eos = true;
    seq->params.stop = {"\n\nUser:", "</answer>"};
    seq->output = std::make_unique<OutputProcessor>(**tokenizer, seq->params);
    scheduler.Add(std::move(seq));
  }
  // Token ids of ordinary text, as a model emits them.
  const std::vector<int32_t> text = (*tokenizer)->EncodePrompt(
      "The capital of France is Paris, which lies on the Seine. Its population is about two "
      "million people, and the wider region holds more than twelve million.").value();
  int64_t step = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ScheduledBatch batch = scheduler.Schedule();
    StepOutputs outputs;
    outputs.step_id = ++step;
    for (const ScheduledBatch::Entry& e : batch.entries) {
      SequenceStepOutput& out = outputs.sequences.emplace_back();
      out.seq_id = e.seq->seq_id;
      out.token_ids.push_back(text[(e.seq->seq_id + step) % text.size()]);
    }
    state.ResumeTiming();
    benchmark::DoNotOptimize(scheduler.Postprocess(batch, outputs));
  }
  state.counters["running"] = running;
}
// The first iteration is the prefill; the rest are decode steps of every request.
BENCHMARK(BM_PostprocessDecodeStep)->Arg(1)->Arg(8)->Arg(64)->Arg(256)->Iterations(400)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tpserve

BENCHMARK_MAIN();
