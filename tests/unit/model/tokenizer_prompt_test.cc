// Tokenizer::EncodePrompt: what both front ends (gRPC and HTTP) do to a text prompt.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer.h"

namespace tpserve {
namespace {

// One token per byte (id = the byte, in byte-level BPE's mapped form), then "<s>" (256) as a
// control token.
std::unique_ptr<Tokenizer> MakeTokenizer(bool add_bos) {
  TokenizerData data;
  for (int byte = 0; byte < 256; ++byte) {
    data.tokens.push_back(MapBytes(std::string(1, static_cast<char>(byte))));
    data.token_types.push_back(TokenType::kNormal);
  }
  data.tokens.push_back("<s>");
  data.token_types.push_back(TokenType::kControl);
  data.pre_tokenizer = "smollm";
  data.add_bos = add_bos;
  data.bos_id = 256;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Create(std::move(data));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return std::move(*tokenizer);
}

TEST(TokenizerPrompt, BosFirstOnceWhenTheModelAsks) {
  const std::unique_ptr<Tokenizer> tokenizer = MakeTokenizer(/*add_bos=*/true);
  EXPECT_EQ(*tokenizer->EncodePrompt("hi"), (std::vector<int32_t>{256, 'h', 'i'}));
  EXPECT_EQ(*tokenizer->EncodePrompt("<s>hi"), (std::vector<int32_t>{256, 'h', 'i'}));
  EXPECT_EQ(*tokenizer->EncodePrompt(""), (std::vector<int32_t>{256}));
}

TEST(TokenizerPrompt, WithoutBosItIsEncodeWithSpecialTokens) {
  const std::unique_ptr<Tokenizer> tokenizer = MakeTokenizer(/*add_bos=*/false);
  EXPECT_EQ(*tokenizer->EncodePrompt("a<s>"), (std::vector<int32_t>{'a', 256}));
  EXPECT_EQ(*tokenizer->EncodePrompt("a<s>"), *tokenizer->Encode("a<s>", /*parse_special=*/true));
}

TEST(TokenizerPrompt, InvalidUtf8IsAnError) {
  const std::unique_ptr<Tokenizer> tokenizer = MakeTokenizer(/*add_bos=*/true);
  EXPECT_EQ(tokenizer->EncodePrompt("a\xFF").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
