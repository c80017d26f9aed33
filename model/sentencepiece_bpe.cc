#include "model/sentencepiece_bpe.h"

#include <unicode/utf8.h>

#include <queue>
#include <string>

namespace tpserve {

std::string EscapeSpaces(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 4);
  for (const char c : text) {
    if (c == ' ') {
      escaped += "\xE2\x96\x81";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

void EncodeSentencePiece(std::string_view escaped, const SentencePieceVocabulary& vocabulary,
                         std::vector<int32_t>* ids) {
  // Symbols form a list over `escaped`; a merged-away symbol has size 0.
  struct Symbol {
    uint32_t begin;
    uint32_t size;  // bytes
    int32_t prev;   // -1 at the ends
    int32_t next;
  };
  // A candidate merge of `left` with `right`; stale once either has changed size.
  struct Pair {
    float score;
    int32_t left;
    int32_t right;
    uint32_t size;  // bytes of the merged text when the pair was made
    bool operator<(const Pair& other) const {  // the queue's top: highest score, then leftmost
      return score != other.score ? score < other.score : left > other.left;
    }
  };

  std::vector<Symbol> symbols;
  symbols.reserve(escaped.size());
  const int32_t length = static_cast<int32_t>(escaped.size());
  for (int32_t i = 0; i < length;) {
    const int32_t begin = i;
    U8_FWD_1_UNSAFE(escaped.data(), i);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(begin), static_cast<uint32_t>(i - begin), index - 1,
                       i < length ? index + 1 : -1});
  }

  auto text_of = [&](const Symbol& s) { return escaped.substr(s.begin, s.size); };
  std::priority_queue<Pair> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = symbols[left].size + symbols[right].size;
    const std::optional<int32_t> id = vocabulary.Find(escaped.substr(symbols[left].begin, size));
    if (!id.has_value()) return;
    queue.push({vocabulary.Score(*id), left, right, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Pair pair = queue.top();
    queue.pop();
    Symbol& left = symbols[pair.left];
    Symbol& right = symbols[pair.right];
    if (left.size == 0 || right.size == 0 || left.size + right.size != pair.size ||
        left.next != pair.right) {
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
    const std::string_view symbol = text_of(symbols[i]);
    if (const std::optional<int32_t> id = vocabulary.Find(symbol)) {
      ids->push_back(*id);
      continue;
    }
    for (const char byte : symbol) {
      if (const std::optional<int32_t> id = vocabulary.ByteToken(static_cast<uint8_t>(byte))) {
        ids->push_back(*id);
      }
    }
  }
}

}  // namespace tpserve
