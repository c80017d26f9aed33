// Fuzzes the bundled model's tokenizer and the streaming detokenizer. Each input is used twice:
// as text to encode, and as a list of token ids to decode (4 bytes each, taken modulo the
// vocabulary, since Decode's contract is ids in range). Checked, from tokenizer.h and
// detokenizer.h:
//   - Encode and EncodePrompt fail exactly when the text is not UTF-8;
//   - encoded ids lie in the vocabulary, and decode back to the text whenever every byte of the
//     text has a byte token (bytes without one are documented as dropped);
//   - IncrementalDetokenizer hands out only UTF-8, and its pieces add up to Decode() of the same
//     ids whenever that is UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/bundled_model.h"
#include "fuzz/require.h"
#include "model/detokenizer.h"

namespace tpserve {
namespace {

// Written from the Unicode definition (Table 3-7), independently of the tokenizer's own check.
bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t lead = static_cast<uint8_t>(s[i]);
    size_t length;
    uint32_t smallest;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2, smallest = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, smallest = 0x800;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4, smallest = 0x10000;
    } else {
      return false;
    }
    if (i + length > s.size()) return false;
    uint32_t code_point = lead & (0x7F >> length);
    for (size_t k = 1; k < length; ++k) {
      const uint8_t next = static_cast<uint8_t>(s[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code_point = (code_point << 6) | (next & 0x3F);
    }
    if (code_point < smallest || code_point > 0x10FFFF ||
        (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return false;
    }
    i += length;
  }
  return true;
}

void CheckEncode(const Tokenizer& tokenizer, std::string_view text) {
  const bool utf8 = IsUtf8(text);
  bool every_byte_has_a_token = true;
  for (char c : text) {
    every_byte_has_a_token &= tokenizer.ByteToken(static_cast<uint8_t>(c)).has_value();
  }
  for (bool parse_special : {false, true}) {
    const absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text, parse_special);
    Require(ids.ok() == utf8, "Encode fails exactly on text that is not UTF-8");
    if (!ids.ok()) continue;
    for (int32_t id : *ids) Require(id >= 0 && id < tokenizer.vocab_size(), "ids in vocabulary");
    if (every_byte_has_a_token) {
      Require(tokenizer.Decode(*ids) == text, "Decode(Encode(text)) == text");
    }
  }
  const absl::StatusOr<std::vector<int32_t>> prompt = tokenizer.EncodePrompt(text);
  Require(prompt.ok() == utf8, "EncodePrompt fails exactly on text that is not UTF-8");
}

void CheckDecode(const Tokenizer& tokenizer, const uint8_t* data, size_t size) {
  std::vector<int32_t> ids(size / 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint32_t raw;
    std::memcpy(&raw, data + 4 * i, 4);
    ids[i] = static_cast<int32_t>(raw % static_cast<uint32_t>(tokenizer.vocab_size()));
  }
  const std::string decoded = tokenizer.Decode(ids);
  IncrementalDetokenizer detokenizer(tokenizer);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = detokenizer.Add(id);
    Require(IsUtf8(piece), "every detokenized piece is UTF-8");
    streamed += piece;
  }
  const std::string tail = detokenizer.Flush();
  Require(IsUtf8(tail), "the flushed tail is UTF-8");
  streamed += tail;
  if (IsUtf8(decoded)) Require(streamed == decoded, "streamed text == Decode() when UTF-8");
}

}  // namespace
}  // namespace tpserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tpserve::Tokenizer& tokenizer = *tpserve::GetBundledModel().tokenizer;
  tpserve::CheckEncode(tokenizer, std::string_view(reinterpret_cast<const char*>(data), size));
  tpserve::CheckDecode(tokenizer, data, size);
  return 0;
}
