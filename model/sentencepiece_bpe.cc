#include "model/sentencepiece_bpe.h"

#include <string>

#include "model/symbol_merge.h"

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
  // A pair merges when the two form a token; the higher its score, the sooner.
  auto priority = [&](std::string_view left, std::string_view right) -> std::optional<float> {
    const std::optional<int32_t> id =
        vocabulary.Find(std::string_view(left.data(), left.size() + right.size()));
    if (!id.has_value()) return std::nullopt;
    return -vocabulary.Score(*id);
  };
  MergeSymbols<float>(escaped, priority, [&](std::string_view symbol) {
    if (const std::optional<int32_t> id = vocabulary.Find(symbol)) {
      ids->push_back(*id);
      return;
    }
    for (const char byte : symbol) {
      if (const std::optional<int32_t> id = vocabulary.ByteToken(static_cast<uint8_t>(byte))) {
        ids->push_back(*id);
      }
    }
  });
}

}  // namespace tpserve
