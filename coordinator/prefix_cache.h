// The prefix cache seam the scheduler works against: RadixCache (RadixAttention), or
// NoPrefixCache for --no-prefix-cache, which caches nothing, so the scheduler has one code path.
//
// Not thread-safe: owned by the engine thread.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tpserve {

class PrefixCache {
 public:
  // A cached prefix's handle; the implementation defines it. Null from NoPrefixCache.
  struct Node;

  struct MatchResult {
    std::vector<int32_t> block_ids;  // the cached blocks of the longest matched prefix, in order
    Node* node = nullptr;            // covers exactly those blocks
  };

  struct InsertResult {
    Node* node = nullptr;        // covers exactly the inserted prefix
    int32_t num_new_blocks = 0;  // blocks the cache took a reference on
  };

  struct Stats {
    int64_t queries = 0;       // Match calls
    int64_t query_tokens = 0;  // tokens passed to Match
    int64_t hit_tokens = 0;    // tokens Match found cached
  };

  virtual ~PrefixCache() = default;

  // The longest prefix of `tokens` made of whole cached blocks; takes no references.
  virtual MatchResult Match(absl::Span<const int32_t> tokens) = 0;
  // Offers the prefix `tokens` (whole blocks) stored in `block_ids`; the cache references the
  // blocks it keeps, and the caller's blocks stay the caller's.
  virtual InsertResult Insert(absl::Span<const int32_t> tokens,
                              absl::Span<const int32_t> block_ids) = 0;
  // A locked node and its ancestors are never evicted; Unlock pairs with an earlier Lock. Both
  // accept what Match or Insert returned.
  virtual void Lock(Node* node) = 0;
  virtual void Unlock(Node* node) = 0;
  // Removes up to `n` unlocked blocks (every one for EvictAll); returns how many.
  virtual int32_t Evict(int32_t n) = 0;
  virtual int32_t EvictAll() = 0;

  virtual int32_t num_cached_blocks() const = 0;
  virtual int32_t num_evictable_blocks() const = 0;
  virtual const Stats& stats() const = 0;
};

class NoPrefixCache final : public PrefixCache {
 public:
  MatchResult Match(absl::Span<const int32_t>) override { return {}; }
  InsertResult Insert(absl::Span<const int32_t>, absl::Span<const int32_t>) override { return {}; }
  void Lock(Node*) override {}
  void Unlock(Node*) override {}
  int32_t Evict(int32_t) override { return 0; }
  int32_t EvictAll() override { return 0; }
  int32_t num_cached_blocks() const override { return 0; }
  int32_t num_evictable_blocks() const override { return 0; }
  const Stats& stats() const override { return stats_; }

 private:
  const Stats stats_;
};

}  // namespace tpserve
