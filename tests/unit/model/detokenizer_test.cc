// IncrementalDetokenizer over a synthetic vocabulary: byte tokens <0x00>..<0xFF> (ids 0..255),
// then "hello" and the control token "<|im_end|>".
#include "model/detokenizer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "model/tokenizer.h"

namespace tpserve {
namespace {

constexpr int32_t kHello = 256;
constexpr int32_t kImEnd = 257;
constexpr char kReplacement[] = "\xEF\xBF\xBD";

std::unique_ptr<Tokenizer> MakeTokenizer() {
  TokenizerData data;
  for (int byte = 0; byte < 256; ++byte) {
    data.tokens.push_back(absl::StrFormat("<0x%02X>", byte));
    data.token_types.push_back(TokenType::kByte);
  }
  data.tokens.push_back("hello");
  data.token_types.push_back(TokenType::kNormal);
  data.tokens.push_back("<|im_end|>");
  data.token_types.push_back(TokenType::kControl);
  data.pre_tokenizer = "smollm";
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Create(std::move(data));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return std::move(*tokenizer);
}

// Feeds `ids` one at a time; returns what each Add() returned, then Flush() last.
std::vector<std::string> Stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  IncrementalDetokenizer detokenizer(tokenizer);
  std::vector<std::string> out;
  for (const int32_t id : ids) out.push_back(detokenizer.Add(id));
  out.push_back(detokenizer.Flush());
  return out;
}

using Pieces = std::vector<std::string>;

TEST(IncrementalDetokenizer, CompleteCharactersPassStraightThrough) {
  const auto tokenizer = MakeTokenizer();
  EXPECT_EQ(Stream(*tokenizer, {'a', kHello, ' ', kImEnd}),
            (Pieces{"a", "hello", " ", "<|im_end|>", ""}));
}

TEST(IncrementalDetokenizer, HoldsBackSplitCharactersUntilComplete) {
  const auto tokenizer = MakeTokenizer();
  // € = E2 82 AC, 😀 = F0 9F 98 80, é = C3 A9.
  EXPECT_EQ(Stream(*tokenizer, {0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0x80, 'x', 0xC3, 0xA9}),
            (Pieces{"", "", "€", "", "", "", "😀", "x", "", "é", ""}));
}

TEST(IncrementalDetokenizer, ReplacesBytesThatCanNeverBeCharacters) {
  const auto tokenizer = MakeTokenizer();
  // A lone continuation byte, 0xFF and an overlong lead are replaced at once.
  EXPECT_EQ(Stream(*tokenizer, {0x80, 'a', 0xFF, 0xC0}),
            (Pieces{kReplacement, "a", kReplacement, kReplacement, ""}));
  // A lead byte followed by a non-continuation: the lead is replaced, the next byte kept.
  EXPECT_EQ(Stream(*tokenizer, {0xE2, 'A'}), (Pieces{"", std::string(kReplacement) + "A", ""}));
  // A surrogate (ED A0 80): ED only allows 80..9F next, so ED and then A0, 80 are replaced.
  EXPECT_EQ(Stream(*tokenizer, {0xED, 0xA0, 0x80}),
            (Pieces{"", std::string(kReplacement) + kReplacement, kReplacement, ""}));
}

TEST(IncrementalDetokenizer, FlushReplacesAnIncompleteTailAndResets) {
  const auto tokenizer = MakeTokenizer();
  IncrementalDetokenizer detokenizer(*tokenizer);
  EXPECT_EQ(detokenizer.Add(0xF0), "");
  EXPECT_EQ(detokenizer.Add(0x9F), "");
  EXPECT_EQ(detokenizer.Flush(), kReplacement);
  EXPECT_EQ(detokenizer.Flush(), "");
  EXPECT_EQ(detokenizer.Add('z'), "z");
}

}  // namespace
}  // namespace tpserve
