// The tokenizer against llama.cpp: tests/golden/tokenizer_ids.json holds the ids llama.cpp gives
// every string of tests/golden/tokenizer_corpus.json (scripts/make-golden.py tokenizer, with
// parse_special = true and no BOS) for the bundled SmolLM2 model.
#include <unicode/utf8.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "model/detokenizer.h"
#include "model/gguf_file.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

std::string EnvOrEmpty(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

bool IsValidUtf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t length = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < length;) {
    UChar32 c;
    U8_NEXT(bytes, i, length, c);
    if (c < 0) return false;
  }
  return true;
}

std::string Quoted(std::string_view text) {
  return absl::StrCat("\"", absl::Utf8SafeCHexEscape(absl::string_view(text.data(), text.size())),
                      "\"");
}

// "[id 'piece', ...]" with the pieces as the vocabulary stores them.
std::string Describe(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  std::vector<std::string> parts;
  for (const int32_t id : ids) {
    parts.push_back(id >= 0 && id < tokenizer.vocab_size()
                        ? absl::StrCat(id, " '", tokenizer.TokenText(id), "'")
                        : absl::StrCat(id, " <out of range>"));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

struct GoldenCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Loads the model's tokenizer and the golden ids once; every test fails (none skips) when they
// cannot be read.
class TokenizerMatchesLlamaCpp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (tokenizer_ == nullptr && load_error_ == nullptr) {
      const std::string error = Load();
      if (!error.empty()) load_error_ = new std::string(error);
    }
    ASSERT_EQ(load_error_, nullptr) << *load_error_;
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete golden_;
    delete load_error_;
    tokenizer_ = nullptr;
    golden_ = nullptr;
    load_error_ = nullptr;
  }

  // Sets tokenizer_ and golden_, or returns what went wrong.
  static std::string Load() {
    const std::string model_path = EnvOrEmpty("TPSERVE_MODEL_PATH");
    const std::string golden_dir = EnvOrEmpty("TPSERVE_GOLDEN_DIR");
    if (model_path.empty() || golden_dir.empty()) {
      return "set TPSERVE_MODEL_PATH and TPSERVE_GOLDEN_DIR (ctest sets both)";
    }
    if (!std::filesystem::exists(model_path)) {
      return absl::StrCat("model file ", model_path,
                          " is missing; it is required for the tests: run scripts/fetch-model.sh");
    }
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(model_path);
    if (!file.ok()) return file.status().ToString();
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**file);
    if (!tokenizer.ok()) return tokenizer.status().ToString();

    const std::string golden_path = golden_dir + "/tokenizer_ids.json";
    std::ifstream in(golden_path);
    if (!in) return absl::StrCat("cannot read ", golden_path);
    const nlohmann::json golden = nlohmann::json::parse(in);
    golden_ = new std::vector<GoldenCase>();
    for (const nlohmann::json& entry : golden) {
      golden_->push_back(
          {entry.at("text").get<std::string>(), entry.at("ids").get<std::vector<int32_t>>()});
    }
    tokenizer_ = std::move(*tokenizer).release();
    return "";
  }

  static std::vector<int32_t> EncodeOrDie(std::string_view text, bool parse_special = true) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text, parse_special);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *std::move(ids) : std::vector<int32_t>{};
  }

  static const Tokenizer* tokenizer_;
  static std::vector<GoldenCase>* golden_;
  static std::string* load_error_;
};

const Tokenizer* TokenizerMatchesLlamaCpp::tokenizer_ = nullptr;
std::vector<GoldenCase>* TokenizerMatchesLlamaCpp::golden_ = nullptr;
std::string* TokenizerMatchesLlamaCpp::load_error_ = nullptr;

TEST_F(TokenizerMatchesLlamaCpp, CorpusIsLargeAndCoversTheVocabularyMetadata) {
  EXPECT_GE(golden_->size(), 300u);
  EXPECT_EQ(tokenizer_->vocab_size(), 49152);
  EXPECT_EQ(tokenizer_->pre_tokenizer().name(), "smollm");
  EXPECT_EQ(tokenizer_->bos_id(), 1);
  EXPECT_EQ(tokenizer_->eos_id(), 2);
  EXPECT_FALSE(tokenizer_->add_bos());
}

TEST_F(TokenizerMatchesLlamaCpp, EveryCorpusStringGetsLlamaCppIds) {
  int mismatches = 0;
  for (const GoldenCase& golden : *golden_) {
    const std::vector<int32_t> ids = EncodeOrDie(golden.text);
    if (ids == golden.ids) continue;
    if (++mismatches == 1) {
      ADD_FAILURE() << "first mismatch, text " << Quoted(golden.text)
                    << "\n  llama.cpp: " << Describe(*tokenizer_, golden.ids)
                    << "\n  tpserve:   " << Describe(*tokenizer_, ids);
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << golden_->size() << " corpus strings";
}

// Decode(Encode(s)) is s, less the bytes this vocabulary has no token for (llama.cpp drops them
// too, e.g. U+0004).
TEST_F(TokenizerMatchesLlamaCpp, DecodeInvertsEncode) {
  int dropping = 0;
  for (const GoldenCase& golden : *golden_) {
    std::string expected;
    for (const char c : golden.text) {
      if (tokenizer_->ByteToken(static_cast<uint8_t>(c)).has_value()) expected.push_back(c);
    }
    dropping += expected != golden.text;
    const std::string decoded = tokenizer_->Decode(EncodeOrDie(golden.text));
    EXPECT_EQ(decoded, expected) << "text " << Quoted(golden.text);
  }
  EXPECT_GE(dropping, 1) << "the corpus should hold a string with a byte that has no token";
  EXPECT_FALSE(tokenizer_->ByteToken(0x04).has_value());
  EXPECT_TRUE(tokenizer_->ByteToken(' ').has_value());
}

TEST_F(TokenizerMatchesLlamaCpp, DetokenizerStreamsTheDecodedTextTokenByToken) {
  IncrementalDetokenizer detokenizer(*tokenizer_);
  for (const GoldenCase& golden : *golden_) {
    const std::vector<int32_t> ids = EncodeOrDie(golden.text);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string piece = detokenizer.Add(id);
      ASSERT_TRUE(IsValidUtf8(piece)) << "text " << Quoted(golden.text);
      streamed += piece;
    }
    streamed += detokenizer.Flush();
    EXPECT_EQ(streamed, tokenizer_->Decode(ids)) << "text " << Quoted(golden.text);
  }
}

TEST_F(TokenizerMatchesLlamaCpp, RejectsInvalidUtf8NamingTheByteOffset) {
  const struct {
    std::string text;
    std::string offset;
  } cases[] = {
      {"abc\x80", "offset 3"},            // lone continuation byte
      {"ab\xE2\x82", "offset 2"},         // truncated 3-byte sequence
      {"\xC0\xAF", "offset 0"},           // overlong '/'
      {"x\xFF y", "offset 1"},            // never valid
      {"ok \xED\xA0\x80", "offset 3"},    // UTF-16 surrogate
      {"<|im_start|>\x80", "offset 12"},  // checked before special tokens are cut out
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(c.text, true);
    ASSERT_FALSE(ids.ok()) << Quoted(c.text);
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find(c.offset), std::string::npos) << ids.status();
  }
}

// Ids from llama-cpp-python 0.3.36 for the bundled model.
TEST_F(TokenizerMatchesLlamaCpp, SpecialTokensStayTextWithoutParseSpecial) {
  EXPECT_EQ(EncodeOrDie("<|im_start|>", /*parse_special=*/false),
            (std::vector<int32_t>{44, 108, 306, 79, 3738, 108, 46}));
  EXPECT_EQ(EncodeOrDie("<|im_start|>", /*parse_special=*/true), (std::vector<int32_t>{1}));
}

// llama_vocab_is_eog() is true for exactly 0 <|endoftext|>, 2 <|im_end|> and 4 <reponame>.
TEST_F(TokenizerMatchesLlamaCpp, EndOfGenerationTokensAreLlamaCpps) {
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
    if (tokenizer_->IsEndOfGeneration(id)) eog.push_back(id);
  }
  EXPECT_EQ(eog, (std::vector<int32_t>{0, 2, 4}));
}

TEST_F(TokenizerMatchesLlamaCpp, DecodeRendersControlTokensAsText) {
  EXPECT_EQ(tokenizer_->Decode({1, 30, 2}), "<|im_start|>.<|im_end|>");
}

TEST_F(TokenizerMatchesLlamaCpp, EncodesFourThousandTokensWellUnder50Ms) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "timing is meaningless under AddressSanitizer";
#endif
  std::string text;
  size_t tokens = 0;
  while (tokens < 4000) {
    for (const GoldenCase& golden : *golden_) {
      text += golden.text;
      tokens += golden.ids.size();
    }
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = EncodeOrDie(text);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(ids.size(), 3000u);
  EXPECT_LT(ms, 50.0) << ids.size() << " tokens";
}

// The other pre-tokenizers on the same vocabulary; expected ids from llama.cpp for a copy of the
// model whose tokenizer.ggml.pre was rewritten to each name.
TEST_F(TokenizerMatchesLlamaCpp, OtherPreTokenizersMatchLlamaCpp) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(EnvOrEmpty("TPSERVE_MODEL_PATH"));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::vector<std::string>> tokens =
      (*file)->GetStringArray("tokenizer.ggml.tokens");
  absl::StatusOr<std::vector<std::string>> merges =
      (*file)->GetStringArray("tokenizer.ggml.merges");
  absl::StatusOr<std::vector<int64_t>> types = (*file)->GetIntArray("tokenizer.ggml.token_type");
  ASSERT_TRUE(tokens.ok() && merges.ok() && types.ok());
  TokenizerData data;
  data.tokens = *std::move(tokens);
  data.merges = *std::move(merges);
  for (const int64_t type : *types) data.token_types.push_back(static_cast<TokenType>(type));
  const struct {
    std::string pre;
    std::string text;
    std::vector<int32_t> ids;
  } cases[] = {
      {"gpt-2",
       "It's 2024; I'M here   ok\n\n  x",
       {1589, 506, 216, 34, 32, 34, 36, 43, 339, 23, 61, 1535, 256, 10907, 8866, 1792}},
      {"gpt-2", "$100+200 = 300!!! (a|b) ^_^ ~/x", {20,  33,    32, 32, 27,    34,  32, 32,  446,
                                                    216, 35,    32, 32, 29646, 365, 81, 108, 82,
                                                    25,  13481, 79, 78, 11417, 31,  104}},
      {"gpt-2",
       "12345678 ١٢٣ apples",
       {33, 34, 35, 36, 37, 38, 39, 40, 16936, 111, 164, 112, 164, 113, 13855}},
      {"gpt-2", "Hello world\r\n\tnext", {19556, 905, 2738, 197, 11282}},
      {"gpt-2", "'S 'RE 'Ll 'd's", {23, 67, 637, 3256, 637, 60, 92, 637, 84, 506}},
      {"default",
       "It's 2024; I'M here   ok\n\n  x",
       {1589, 23, 99, 216, 34, 32, 34, 36, 43, 339, 23, 61, 1535, 256, 10907, 8866, 1792}},
      {"default",
       "$100+200 = 300!!! (a|b) ^_^ ~/x",
       {20,  33, 32, 32,  27, 34, 32,  32, 216, 45, 216, 35,  32, 32, 29646,
        216, 24, 81, 108, 82, 25, 216, 78, 79,  78, 216, 110, 31, 104}},
      {"default",
       "12345678 ١٢٣ apples",
       {33, 34, 35, 36, 37, 38, 39, 40, 216, 164, 111, 164, 112, 164, 113, 13855}},
      {"default", "Hello world\r\n\tnext", {19556, 905, 2738, 197, 11282}},
      {"default", "'S 'RE 'Ll 'd's", {23, 67, 216, 23, 3256, 216, 23, 60, 92, 216, 23, 84, 23, 99}},
      {"llama-bpe",
       "It's 2024; I'M here   ok\n\n  x",
       {1589, 506, 216, 34, 32, 34, 36, 43, 339, 23, 61, 1535, 256, 10907, 1116, 216, 1792}},
      {"llama-bpe",
       "$100+200 = 300!!! (a|b) ^_^ ~/x",
       {20,    33,  32, 32,  27, 34, 32,    32, 446, 216,   35, 32, 32,
        29646, 365, 81, 108, 82, 25, 13481, 79, 78,  11417, 31, 104}},
      {"llama-bpe",
       "12345678 ١٢٣ apples",
       {33, 34, 35, 36, 37, 38, 39, 40, 216, 164, 111, 164, 112, 164, 113, 13855}},
      {"llama-bpe", "Hello world\r\n\tnext", {19556, 905, 2738, 197, 11282}},
      {"llama-bpe", "'S 'RE 'Ll 'd's", {23, 67, 637, 3256, 637, 60, 92, 637, 84, 506}},
  };
  std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers;
  for (const auto& c : cases) {
    std::unique_ptr<Tokenizer>& tokenizer = tokenizers[c.pre];
    if (tokenizer == nullptr) {
      TokenizerData copy = data;
      copy.pre_tokenizer = c.pre;
      absl::StatusOr<std::unique_ptr<Tokenizer>> created = Tokenizer::Create(std::move(copy));
      ASSERT_TRUE(created.ok()) << created.status();
      tokenizer = *std::move(created);
    }
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(c.text, true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c.ids) << c.pre << " " << Quoted(c.text)
                           << "\n  llama.cpp: " << Describe(*tokenizer, c.ids)
                           << "\n  tpserve:   " << Describe(*tokenizer, *ids);
  }
}

TEST(PreTokenizer, RejectsAnUnknownNameNamingIt) {
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::Create("chatglm-bpe");
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pre.status().message().find("'chatglm-bpe'"), std::string::npos) << pre.status();
}

TEST(PreTokenizer, SmolLmSplitsDigitsAndKeepsSpacesWithWords) {
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::Create("smollm");
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(
      pre->Split("It's 2024!  ok\n"),
      (std::vector<std::string_view>{"It", "'s", " ", "2", "0", "2", "4", "!", " ", " ok", "\n"}));
  EXPECT_TRUE(pre->Split("").empty());
}

}  // namespace
}  // namespace tpserve
