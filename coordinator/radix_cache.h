// RadixAttention prefix cache at block granularity (DESIGN.md "KV cache and the prefix tree").
//
// A radix tree keyed by token ids. Each edge holds whole blocks: `block_size` tokens per block
// and the id of the KV block that stores them. A path from the root spells a token prefix whose
// K/V the workers already hold, so a new request with that prefix skips computing it.
//
// Ownership: the tree holds one BlockPool reference on every block in it (taken by Insert,
// released by eviction). A request that uses cached blocks takes its own references and locks
// the deepest node it uses (Lock covers the whole path to the root), so that a locked node is
// never evicted. Eviction takes unlocked leaves in least-recently-used order and trims them from
// the tail of their edge one block at a time, so exactly the blocks asked for leave the tree.
//
// Recency is a logical clock that ticks on every Match and Insert, so eviction order is exact
// and testable.
//
// Not thread-safe: owned by the engine thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "coordinator/block_pool.h"
#include "coordinator/prefix_cache.h"

namespace tpserve {

class RadixCache final : public PrefixCache {
 public:
  // `pool` must outlive the cache.
  RadixCache(int32_t block_size, BlockPool* pool);
  ~RadixCache();  // releases every block the tree holds
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  // The longest prefix of `tokens` made of whole cached blocks (at most
  // tokens.size() / block_size blocks). Splits an edge when the match ends inside it, marks
  // the matched path as used now and counts the query in stats(). Takes no references.
  MatchResult Match(absl::Span<const int32_t> tokens) override;

  // Adds the prefix `tokens` (a whole number of blocks) stored in `block_ids`
  // (tokens.size() / block_size ids). Where the tree already holds a block for a prefix it keeps
  // its own, and the caller's block stays the caller's; each block the tree did not have gets a
  // tree reference (BlockPool::Ref). Marks the path as used now.
  InsertResult Insert(absl::Span<const int32_t> tokens,
                      absl::Span<const int32_t> block_ids) override;

  // Lock/Unlock `node` and all its ancestors. Locked nodes are never evicted. Unlock must pair
  // with an earlier Lock of the same node.
  void Lock(Node* node) override;
  void Unlock(Node* node) override;

  // Removes up to `n` blocks, least recently used unlocked leaf first, from the tail of its edge;
  // releases the tree's reference on each. Returns how many blocks were removed.
  int32_t Evict(int32_t n) override;
  // Evicts every unlocked block (an operator's "flush"). Returns how many were removed.
  int32_t EvictAll() override;

  int32_t block_size() const { return block_size_; }
  int32_t num_cached_blocks() const override { return num_cached_blocks_; }
  // Blocks that Evict could remove now: those in nodes with no lock.
  int32_t num_evictable_blocks() const override { return num_evictable_blocks_; }
  int32_t num_nodes() const;  // excluding the root
  // Every block id in the tree (any order): for invariant checks and the admin view.
  std::vector<int32_t> CachedBlockIds() const;
  const Stats& stats() const override { return stats_; }

 private:
  // Implementation-specific members are declared in radix_cache.cc's Node and here.

  // Walks from the root along `tokens` (whole blocks) as far as the tree holds them, splitting
  // the edge where the walk ends inside one. Returns the node covering exactly the walked prefix
  // and appends that prefix's block ids to `block_ids`.
  Node* Descend(absl::Span<const int32_t> tokens, std::vector<int32_t>* block_ids);
  // Cuts `node`'s edge after its first `num_head_blocks` blocks. The head becomes a new node
  // between `node` and its parent, so `node` keeps its object, its suffix and its handles.
  Node* Split(Node* node, int32_t num_head_blocks);
  // Stamps `node` and its ancestors with the current clock.
  void Touch(Node* node);
  // Unhooks an emptied leaf from its parent, which may become an evictable leaf.
  void RemoveLeaf(Node* leaf);

  // `evictable_leaves_` holds exactly the nodes for which IsEvictableLeaf is true. Callers
  // unindex a node before changing its last access, children or locks, and index it after.
  bool IsEvictableLeaf(const Node* node) const;
  void IndexLeaf(Node* node);
  void UnindexLeaf(Node* node);

  const int32_t block_size_;
  BlockPool* const pool_;
  std::unique_ptr<Node> root_;
  int32_t num_cached_blocks_ = 0;
  int32_t num_evictable_blocks_ = 0;
  uint64_t clock_ = 0;
  int32_t num_nodes_ = 0;
  uint64_t next_node_id_ = 0;
  // Unlocked leaves keyed by (last access, node id): begin() is the next one to evict, so
  // eviction never scans the tree. The id makes the order total and deterministic.
  std::map<std::pair<uint64_t, uint64_t>, Node*> evictable_leaves_;
  Stats stats_;
};

}  // namespace tpserve
