#include "model/detokenizer.h"

#include <unicode/utf8.h>

#include <string_view>

namespace tpserve {
namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

std::string IncrementalDetokenizer::Add(int32_t id) {
  if (!(skip_special_ && tokenizer_.token_type(id) == TokenType::kControl)) {
    pending_.append(tokenizer_.TokenBytes(id));
  }
  return Drain(/*final=*/false);
}

std::string IncrementalDetokenizer::Flush() { return Drain(/*final=*/true); }

std::string IncrementalDetokenizer::Drain(bool final) {
  std::string out;
  const auto* bytes = reinterpret_cast<const uint8_t*>(pending_.data());
  const int32_t length = static_cast<int32_t>(pending_.size());
  int32_t i = 0;
  while (i < length) {
    const int32_t start = i;
    UChar32 c;
    // On an ill-formed sequence U8_NEXT steps over its maximal subpart: the longest prefix
    // of a well-formed sequence, or one byte.
    U8_NEXT(bytes, i, length, c);
    if (c >= 0) {
      out.append(pending_, start, i - start);
      continue;
    }
    // A valid lead byte whose subpart runs to the end may still be completed by later tokens.
    const bool incomplete = i == length && bytes[start] >= 0xC2 && bytes[start] <= 0xF4;
    if (incomplete && !final) {
      pending_.erase(0, start);
      return out;
    }
    out.append(kReplacementCharacter);
  }
  pending_.clear();
  return out;
}

}  // namespace tpserve
