// Tokenizer::Encode's split of text around special tokens, for vocabularies a file may declare.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer.h"

namespace tpserve {
namespace {

// One token per byte (id = the byte, in byte-level BPE's mapped form), then `specials` as
// control tokens with ids 256, 257, ...
std::unique_ptr<Tokenizer> MakeTokenizer(const std::vector<std::string>& specials) {
  TokenizerData data;
  for (int byte = 0; byte < 256; ++byte) {
    data.tokens.push_back(MapBytes(std::string(1, static_cast<char>(byte))));
    data.token_types.push_back(TokenType::kNormal);
  }
  for (const std::string& special : specials) {
    data.tokens.push_back(special);
    data.token_types.push_back(TokenType::kControl);
  }
  data.pre_tokenizer = "smollm";
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Create(std::move(data));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return std::move(*tokenizer);
}

// A fuzzed GGUF declared a control token with empty text: the split found it at every offset
// without moving on and never returned.
TEST(TokenizerSpecialTokens, AnEmptySpecialTokenIsNeverMatchedInText) {
  const std::unique_ptr<Tokenizer> tokenizer = MakeTokenizer({"", "<s>"});
  EXPECT_EQ(*tokenizer->Encode("a<s>b", /*parse_special=*/true),
            (std::vector<int32_t>{'a', 257, 'b'}));
}

TEST(TokenizerSpecialTokens, TheLongerOfTwoOverlappingTokensWins) {
  const std::unique_ptr<Tokenizer> tokenizer = MakeTokenizer({"<s>", "<s>x"});
  EXPECT_EQ(*tokenizer->Encode("<s>x<s>", /*parse_special=*/true),
            (std::vector<int32_t>{257, 256}));
  EXPECT_EQ(*tokenizer->Encode("<s>x", /*parse_special=*/false),
            (std::vector<int32_t>{'<', 's', '>', 'x'}));
}

}  // namespace
}  // namespace tpserve
