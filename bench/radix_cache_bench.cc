// Cost of the prefix cache on the engine thread, in a tree the size of a full H200 KV pool
// (~100,000 blocks of 16 tokens).
//
//   tpserve-bench-radix [--benchmark_filter=...]
//
// BM_MatchInsert4096/<shared_tokens>: one iteration is what admitting and then caching a
// 4,096-token prompt costs the cache: Match, allocating its uncached blocks, Insert, and releasing
// the request's references. The prompt shares its first <shared_tokens> tokens with a cached
// prompt (0: nothing in common). Target: < 50 us.
// BM_Evict256: one Evict of a whole prompt's worth of blocks from that tree (manual time, so the
// untimed refill does not count).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "coordinator/block_pool.h"
#include "coordinator/radix_cache.h"

namespace tpserve {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kPromptTokens = 4096;
constexpr int32_t kPromptBlocks = kPromptTokens / kBlockSize;
constexpr int32_t kTreeBlocks = 100000;
// Prompts admitted between untimed trims of the tree back to kTreeBlocks.
constexpr int32_t kPromptsPerRefill = 64;
constexpr int32_t kPoolBlocks = kTreeBlocks + (kPromptsPerRefill + 1) * kPromptBlocks;
constexpr int32_t kVocab = 32000;
constexpr int32_t kSystemPrompts = 64;
constexpr int32_t kSystemPromptTokens = 512;
// Long prefixes the shared-prefix variant reuses round-robin, so they stay recently used.
constexpr int32_t kHotPrefixes = 16;

using Tokens = std::vector<int32_t>;

// A cache filled with ~kTreeBlocks blocks of prompts that each start with one of a few system
// prompts, as a chat deployment's would.
class FilledCache {
 public:
  FilledCache() : pool_(kPoolBlocks), cache_(kBlockSize, &pool_) {
    for (int32_t i = 0; i < kSystemPrompts; ++i) {
      system_prompts_.push_back(RandomTokens(kSystemPromptTokens));
    }
    while (cache_.num_cached_blocks() < kTreeBlocks) {
      const Tokens& system = system_prompts_[rng_() % kSystemPrompts];
      Tokens prompt = system;
      const Tokens rest = RandomTokens(kPromptTokens - kSystemPromptTokens);
      prompt.insert(prompt.end(), rest.begin(), rest.end());
      Admit(prompt);
      if (static_cast<int32_t>(hot_prompts_.size()) < kHotPrefixes) hot_prompts_.push_back(prompt);
    }
    // The hot prompts went in first; use them again so the first trim does not evict them.
    for (const Tokens& hot : hot_prompts_) cache_.Match(hot);
  }

  // Match, take blocks for the uncached rest, Insert, then drop the request's references so only
  // the tree holds the new blocks. Returns the number of cached blocks Match found.
  int32_t Admit(const Tokens& prompt) {
    RadixCache::MatchResult match = cache_.Match(prompt);
    const int32_t hit = static_cast<int32_t>(match.block_ids.size());
    std::optional<std::vector<int32_t>> fresh = pool_.Allocate(kPromptBlocks - hit);
    if (!fresh.has_value()) std::abort();  // the refill keeps the pool from running dry
    std::vector<int32_t>& block_ids = match.block_ids;
    block_ids.insert(block_ids.end(), fresh->begin(), fresh->end());
    cache_.Insert(prompt, block_ids);
    pool_.Release(*fresh);
    return hit;
  }

  // The next prompts to admit: the first `shared_tokens` of a hot cached prompt, then new tokens.
  std::vector<Tokens> NextPrompts(int32_t n, int32_t shared_tokens) {
    std::vector<Tokens> prompts;
    for (int32_t i = 0; i < n; ++i) {
      const Tokens& hot = hot_prompts_[next_hot_++ % kHotPrefixes];
      Tokens prompt(hot.begin(), hot.begin() + shared_tokens);
      const Tokens rest = RandomTokens(kPromptTokens - shared_tokens);
      prompt.insert(prompt.end(), rest.begin(), rest.end());
      prompts.push_back(std::move(prompt));
    }
    return prompts;
  }

  void TrimToTreeSize() { cache_.Evict(cache_.num_cached_blocks() - kTreeBlocks); }

  RadixCache& cache() { return cache_; }

 private:
  Tokens RandomTokens(int32_t n) {
    Tokens tokens(n);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng_() % kVocab);
    return tokens;
  }

  std::mt19937 rng_{42};
  BlockPool pool_;
  RadixCache cache_;
  std::vector<Tokens> system_prompts_;
  std::vector<Tokens> hot_prompts_;
  uint32_t next_hot_ = 0;
};

void BM_MatchInsert4096(benchmark::State& state) {
  const int32_t shared_tokens = static_cast<int32_t>(state.range(0));
  FilledCache filled;
  std::vector<Tokens> prompts;
  size_t next = 0;
  int64_t hit_blocks = 0;
  for (auto _ : state) {
    if (next == prompts.size()) {
      state.PauseTiming();
      filled.TrimToTreeSize();
      prompts = filled.NextPrompts(kPromptsPerRefill, shared_tokens);
      next = 0;
      state.ResumeTiming();
    }
    hit_blocks += filled.Admit(prompts[next++]);
  }
  state.counters["hit_blocks"] =
      benchmark::Counter(static_cast<double>(hit_blocks), benchmark::Counter::kAvgIterations);
  state.counters["tree_blocks"] = filled.cache().num_cached_blocks();
  state.counters["tree_nodes"] = filled.cache().num_nodes();
}
BENCHMARK(BM_MatchInsert4096)->Arg(0)->Arg(3584)->Unit(benchmark::kMicrosecond);

void BM_Evict256(benchmark::State& state) {
  FilledCache filled;
  for (auto _ : state) {
    filled.Admit(filled.NextPrompts(1, 0).front());
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(filled.cache().Evict(kPromptBlocks));
    const auto end = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(end - start).count());
  }
}
BENCHMARK(BM_Evict256)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tpserve

BENCHMARK_MAIN();
