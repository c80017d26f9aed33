#include "coordinator/radix_cache.h"

#include <algorithm>
#include <cstddef>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "common/check.h"

namespace tpserve {
namespace {

// Children are keyed by the full token content of their first block, compared element by
// element, so two different blocks whose hashes collide stay distinct children. Both functors
// are transparent so a lookup takes a span of the prompt without copying it.
struct BlockHash {
  using is_transparent = void;
  size_t operator()(absl::Span<const int32_t> block) const {
    return absl::Hash<absl::Span<const int32_t>>{}(block);
  }
};

struct BlockEq {
  using is_transparent = void;
  bool operator()(absl::Span<const int32_t> a, absl::Span<const int32_t> b) const { return a == b; }
};

}  // namespace

// The handle PrefixCache declares: a tree node.
struct PrefixCache::Node {
  Node* parent = nullptr;          // null only for the root
  uint64_t id = 0;                 // creation order; the LRU tie-break
  std::vector<int32_t> tokens;     // [block_ids.size() * block_size] the edge from `parent`
  std::vector<int32_t> block_ids;  // [blocks on the edge]
  // Keyed by a copy of each child's first block: the child's own `tokens` shift when it is
  // split, so a key pointing into them would go stale.
  absl::flat_hash_map<std::vector<int32_t>, std::unique_ptr<Node>, BlockHash, BlockEq> children;
  int32_t lock_count = 0;    // Locks held on this node or any descendant
  int32_t own_locks = 0;     // Locks held on this very node: lets Unlock check its pairing
  uint64_t last_access = 0;  // clock_ of the last Match/Insert whose path covered this node
};

RadixCache::RadixCache(int32_t block_size, BlockPool* pool)
    : block_size_(block_size), pool_(pool), root_(std::make_unique<Node>()) {
  TP_CHECK(block_size > 0);
  TP_CHECK(pool != nullptr);
  root_->id = next_node_id_++;
}

RadixCache::~RadixCache() {
  // Iterative: a chain of one-block nodes is as deep as the longest cached prompt is long.
  std::vector<std::unique_ptr<Node>> pending;
  pending.push_back(std::move(root_));
  while (!pending.empty()) {
    std::unique_ptr<Node> node = std::move(pending.back());
    pending.pop_back();
    pool_->Release(node->block_ids);
    for (auto& [key, child] : node->children) pending.push_back(std::move(child));
  }
}

RadixCache::MatchResult RadixCache::Match(absl::Span<const int32_t> tokens) {
  ++clock_;
  const size_t num_blocks = tokens.size() / block_size_;
  MatchResult result;
  result.node = Descend(tokens.first(num_blocks * block_size_), &result.block_ids);
  Touch(result.node);
  ++stats_.queries;
  stats_.query_tokens += static_cast<int64_t>(tokens.size());
  stats_.hit_tokens += static_cast<int64_t>(result.block_ids.size()) * block_size_;
  return result;
}

RadixCache::InsertResult RadixCache::Insert(absl::Span<const int32_t> tokens,
                                            absl::Span<const int32_t> block_ids) {
  TP_CHECK(tokens.size() % block_size_ == 0);
  TP_CHECK(block_ids.size() == tokens.size() / block_size_);
  ++clock_;
  std::vector<int32_t> cached;
  Node* node = Descend(tokens, &cached);
  InsertResult result;
  result.num_new_blocks = static_cast<int32_t>(block_ids.size() - cached.size());
  if (result.num_new_blocks > 0) {
    const absl::Span<const int32_t> new_tokens = tokens.subspan(cached.size() * block_size_);
    const absl::Span<const int32_t> new_blocks = block_ids.subspan(cached.size());
    auto leaf = std::make_unique<Node>();
    leaf->parent = node;
    leaf->id = next_node_id_++;
    leaf->tokens.assign(new_tokens.begin(), new_tokens.end());
    leaf->block_ids.assign(new_blocks.begin(), new_blocks.end());
    pool_->Ref(new_blocks);
    UnindexLeaf(node);
    Node* added = leaf.get();
    node->children.emplace(
        std::vector<int32_t>(new_tokens.begin(), new_tokens.begin() + block_size_),
        std::move(leaf));
    ++num_nodes_;
    num_cached_blocks_ += result.num_new_blocks;
    num_evictable_blocks_ += result.num_new_blocks;
    node = added;
  }
  Touch(node);
  result.node = node;
  return result;
}

void RadixCache::Lock(Node* node) {
  TP_CHECK(node != nullptr);
  UnindexLeaf(node);
  ++node->own_locks;
  for (Node* n = node; n != nullptr; n = n->parent) {
    if (n->lock_count++ == 0) num_evictable_blocks_ -= static_cast<int32_t>(n->block_ids.size());
  }
}

void RadixCache::Unlock(Node* node) {
  TP_CHECK(node != nullptr);
  TP_CHECK_MSG(node->own_locks > 0, "Unlock without a matching Lock");
  --node->own_locks;
  for (Node* n = node; n != nullptr; n = n->parent) {
    TP_CHECK(n->lock_count > 0);
    if (--n->lock_count == 0) num_evictable_blocks_ += static_cast<int32_t>(n->block_ids.size());
  }
  IndexLeaf(node);
}

int32_t RadixCache::Evict(int32_t n) {
  TP_CHECK(n >= 0);
  int32_t removed = 0;
  while (removed < n && !evictable_leaves_.empty()) {
    Node* leaf = evictable_leaves_.begin()->second;
    const int32_t size = static_cast<int32_t>(leaf->block_ids.size());
    const int32_t take = std::min(n - removed, size);
    // One block at a time from the tail, so the pool's free list gets them tail first.
    for (int32_t i = size - 1; i >= size - take; --i) pool_->Release({leaf->block_ids[i]});
    removed += take;
    if (take == size) {
      RemoveLeaf(leaf);
    } else {
      leaf->block_ids.resize(size - take);
      leaf->tokens.resize(static_cast<size_t>(size - take) * block_size_);
    }
  }
  num_cached_blocks_ -= removed;
  num_evictable_blocks_ -= removed;
  return removed;
}

int32_t RadixCache::EvictAll() { return Evict(num_evictable_blocks_); }

int32_t RadixCache::num_nodes() const { return num_nodes_; }

std::vector<int32_t> RadixCache::CachedBlockIds() const {
  std::vector<int32_t> ids;
  ids.reserve(num_cached_blocks_);
  std::vector<const Node*> pending = {root_.get()};
  while (!pending.empty()) {
    const Node* node = pending.back();
    pending.pop_back();
    ids.insert(ids.end(), node->block_ids.begin(), node->block_ids.end());
    for (const auto& [key, child] : node->children) pending.push_back(child.get());
  }
  return ids;
}

RadixCache::Node* RadixCache::Descend(absl::Span<const int32_t> tokens,
                                      std::vector<int32_t>* block_ids) {
  Node* node = root_.get();
  size_t pos = 0;  // tokens walked so far
  while (pos < tokens.size()) {
    auto it = node->children.find(tokens.subspan(pos, block_size_));
    if (it == node->children.end()) break;
    Node* child = it->second.get();
    const absl::Span<const int32_t> rest = tokens.subspan(pos);
    const size_t compared = std::min(rest.size(), child->tokens.size());
    const size_t same_tokens =
        std::mismatch(rest.begin(), rest.begin() + compared, child->tokens.begin()).first -
        rest.begin();
    const int32_t same_blocks = static_cast<int32_t>(same_tokens / block_size_);
    block_ids->insert(block_ids->end(), child->block_ids.begin(),
                      child->block_ids.begin() + same_blocks);
    pos += static_cast<size_t>(same_blocks) * block_size_;
    if (same_blocks < static_cast<int32_t>(child->block_ids.size())) {
      return Split(child, same_blocks);
    }
    node = child;
  }
  return node;
}

RadixCache::Node* RadixCache::Split(Node* node, int32_t num_head_blocks) {
  TP_CHECK(num_head_blocks > 0 && num_head_blocks < static_cast<int32_t>(node->block_ids.size()));
  const auto head_tokens =
      node->tokens.begin() + static_cast<ptrdiff_t>(num_head_blocks) * block_size_;
  auto head = std::make_unique<Node>();
  head->parent = node->parent;
  head->id = next_node_id_++;
  head->tokens.assign(node->tokens.begin(), head_tokens);
  head->block_ids.assign(node->block_ids.begin(), node->block_ids.begin() + num_head_blocks);
  head->lock_count = node->lock_count;
  head->last_access = node->last_access;
  node->tokens.erase(node->tokens.begin(), head_tokens);
  node->block_ids.erase(node->block_ids.begin(), node->block_ids.begin() + num_head_blocks);

  // The head starts with the same block as the old edge, so it takes over the parent's slot.
  std::unique_ptr<Node>& slot =
      head->parent->children.find(absl::MakeConstSpan(head->tokens).first(block_size_))->second;
  std::unique_ptr<Node> tail = std::move(slot);
  Node* added = head.get();
  slot = std::move(head);
  tail->parent = added;
  added->children.emplace(
      std::vector<int32_t>(tail->tokens.begin(), tail->tokens.begin() + block_size_),
      std::move(tail));
  ++num_nodes_;
  return added;
}

void RadixCache::Touch(Node* node) {
  UnindexLeaf(node);
  for (Node* n = node; n != nullptr; n = n->parent) n->last_access = clock_;
  IndexLeaf(node);
}

void RadixCache::RemoveLeaf(Node* leaf) {
  UnindexLeaf(leaf);
  Node* parent = leaf->parent;
  auto it = parent->children.find(absl::MakeConstSpan(leaf->tokens).first(block_size_));
  TP_CHECK(it != parent->children.end() && it->second.get() == leaf);
  parent->children.erase(it);
  --num_nodes_;
  IndexLeaf(parent);
}

bool RadixCache::IsEvictableLeaf(const Node* node) const {
  return node != root_.get() && node->children.empty() && node->lock_count == 0;
}

void RadixCache::IndexLeaf(Node* node) {
  if (IsEvictableLeaf(node)) {
    evictable_leaves_.emplace(std::pair(node->last_access, node->id), node);
  }
}

void RadixCache::UnindexLeaf(Node* node) {
  evictable_leaves_.erase(std::pair(node->last_access, node->id));
}

}  // namespace tpserve
