// Tokenizer::Encode's split of text around special tokens, and the ids that end generation, for
// vocabularies a file may declare.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf_file.h"
#include "model/gguf_writer.h"
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

// A byte-level vocabulary of "a".."z" and "[stop]" as a GGUF file names it, with `more_eos` as
// tpserve.eos_token_ids.
absl::StatusOr<std::unique_ptr<Tokenizer>> FromGgufWithMoreEos(
    const std::vector<int32_t>& more_eos) {
  GgufWriter writer;
  std::vector<std::string> tokens;
  for (char c = 'a'; c <= 'z'; ++c) tokens.emplace_back(1, c);
  tokens.push_back("[stop]");
  writer.SetString("tokenizer.ggml.model", "gpt2");
  writer.SetStringArray("tokenizer.ggml.tokens", tokens);
  writer.SetStringArray("tokenizer.ggml.merges", {});
  writer.SetUint32("tokenizer.ggml.eos_token_id", 0);
  writer.SetInt32Array("tpserve.eos_token_ids", more_eos);
  const std::vector<uint8_t> bytes = writer.Serialize();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(bytes, "vocab.gguf");
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file);
}

TEST(TokenizerEndOfGeneration, TheFilesFurtherEosIdsEndGeneration) {
  const absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = FromGgufWithMoreEos({0, 3, 26});
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->end_of_generation_ids(), (absl::flat_hash_set<int32_t>{0, 3, 26}));
  EXPECT_FALSE((*tokenizer)->IsEndOfGeneration(4));
}

TEST(TokenizerEndOfGeneration, AFurtherEosIdOutsideTheVocabularyIsRefused) {
  const absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = FromGgufWithMoreEos({3, 27});
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().message(),
            "tpserve.eos_token_ids holds 27, outside the vocabulary of 27");
}

}  // namespace
}  // namespace tpserve
