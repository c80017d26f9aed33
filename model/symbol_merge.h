// The merge loop both BPE tokenizers share: a word's UTF-8 characters become symbols, and the
// adjacent pair that `priority` ranks first merges into one symbol, again and again, until no
// pair ranks. Byte-level BPE ranks a pair by its merge rule's line (lower first); SentencePiece
// by the score of the token the pair forms (higher first, given negated). Ties go to the
// leftmost pair.
#pragma once

#include <unicode/utf8.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

namespace tpserve {

// `priority(left, right)`: std::optional<Key>, the pair's rank (lower merges first) or nullopt
// when the two never merge. `emit(symbol)` is called for each final symbol, left to right.
// Precondition: `word` is valid UTF-8.
template <typename Key, typename Priority, typename Emit>
void MergeSymbols(std::string_view word, Priority priority, Emit emit) {
  // Symbols form a list over `word`; a merged-away symbol has size 0.
  struct Symbol {
    uint32_t begin;
    uint32_t size;  // bytes
    int32_t prev;   // -1 at the ends
    int32_t next;
  };
  // A candidate merge of `left` and its right neighbour; stale once either has changed size.
  struct Pair {
    Key key;
    int32_t left;
    int32_t right;
    uint32_t left_size;
    uint32_t right_size;
    bool operator>(const Pair& other) const {
      return key != other.key ? key > other.key : left > other.left;
    }
  };

  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const int32_t length = static_cast<int32_t>(word.size());
  for (int32_t i = 0; i < length;) {
    const int32_t begin = i;
    U8_FWD_1_UNSAFE(word.data(), i);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(begin), static_cast<uint32_t>(i - begin), index - 1,
                       i < length ? index + 1 : -1});
  }

  auto text_of = [&](const Symbol& s) { return word.substr(s.begin, s.size); };
  std::priority_queue<Pair, std::vector<Pair>, std::greater<Pair>> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const std::optional<Key> key = priority(text_of(symbols[left]), text_of(symbols[right]));
    if (!key.has_value()) return;
    queue.push({*key, left, right, symbols[left].size, symbols[right].size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Pair pair = queue.top();
    queue.pop();
    Symbol& left = symbols[pair.left];
    Symbol& right = symbols[pair.right];
    if (left.size == 0 || right.size == 0 || left.size != pair.left_size ||
        right.size != pair.right_size) {
      continue;
    }
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = pair.left;
    try_add(left.prev, pair.left);
    try_add(pair.left, left.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    emit(text_of(symbols[i]));
  }
}

}  // namespace tpserve
