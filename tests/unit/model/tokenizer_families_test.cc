// The tokenizer against llama.cpp's own tokenizer test suite: for each vocabulary family, the
// vocabulary-only GGUF and the cases llama.cpp checks it with (ggml-vocab-NAME.gguf.inp, texts
// separated by "\n__ggml_vocab_test__\n"; .out, one line of ids per text, made by the
// model's Hugging Face tokenizer). Encoded as llama.cpp's test does: no BOS, special tokens not
// parsed. The files come from the pinned llama-cpp-python sdist
// (scripts/fetch-llama-cpp-models.sh), whose directory TPSERVE_LLAMA_CPP_MODELS names; without them
// the test fails, it never skips. Then 300 strings of the project's corpus per family against
// llama.cpp itself (tests/golden/tokenizer_families_ids.json, scripts/make-golden.py
// tokenizer-families).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "model/gguf_file.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<Case> ReadCases(const std::filesystem::path& vocab) {
  const std::string inputs = ReadFile(vocab.string() + ".inp");
  std::vector<std::string> texts = absl::StrSplit(inputs, "\n__ggml_vocab_test__\n");
  // The file ends with a separator; the empty piece after it is no case.
  if (!texts.empty() && texts.back().empty()) texts.pop_back();
  std::vector<std::string> lines = absl::StrSplit(ReadFile(vocab.string() + ".out"), '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  EXPECT_EQ(texts.size(), lines.size()) << vocab;
  std::vector<Case> cases;
  for (size_t i = 0; i < texts.size() && i < lines.size(); ++i) {
    Case c{texts[i], {}};
    for (const absl::string_view id : absl::StrSplit(lines[i], ' ', absl::SkipEmpty())) {
      c.ids.push_back(std::stoi(std::string(id)));
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

std::filesystem::path VocabPath(const std::string& family) {
  const char* dir = std::getenv("TPSERVE_LLAMA_CPP_MODELS");
  return std::filesystem::path(dir == nullptr ? "" : dir) / ("ggml-vocab-" + family + ".gguf");
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFamily(const std::string& family) {
  const std::filesystem::path vocab = VocabPath(family);
  if (!std::filesystem::exists(vocab)) {
    return absl::NotFoundError(vocab.string() +
                               " is missing (TPSERVE_LLAMA_CPP_MODELS): run "
                               "scripts/fetch-llama-cpp-models.sh");
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(vocab.string());
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file);
}

// Every case of `cases` encoded as llama.cpp's test does; one failure per mismatch.
void ExpectEncodes(const std::string& family, const Tokenizer& tokenizer,
                   const std::vector<Case>& cases) {
  int matched = 0;
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(c.text, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    if (*ids == c.ids) {
      ++matched;
    } else {
      ADD_FAILURE() << family << " \"" << absl::CEscape(c.text) << "\"\n  expected "
                    << absl::StrJoin(c.ids, " ") << "\n  got      " << absl::StrJoin(*ids, " ");
    }
  }
  EXPECT_EQ(matched, static_cast<int>(cases.size()));
}

class TokenizerFamiliesTest : public testing::TestWithParam<std::string> {};

TEST_P(TokenizerFamiliesTest, MatchesLlamaCppSuite) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadFamily(GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<Case> cases = ReadCases(VocabPath(GetParam()));
  ASSERT_GT(cases.size(), 20u);
  ExpectEncodes(GetParam(), **tokenizer, cases);
}

// The families with a corpus golden (scripts/make-golden.py tokenizer-families).
class TokenizerCorpusTest : public testing::TestWithParam<std::string> {};

TEST_P(TokenizerCorpusTest, MatchesLlamaCppOnTheCorpus) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadFamily(GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const char* golden = std::getenv("TPSERVE_GOLDEN_DIR");
  ASSERT_NE(golden, nullptr) << "TPSERVE_GOLDEN_DIR is not set";
  const nlohmann::json corpus =
      nlohmann::json::parse(ReadFile(std::filesystem::path(golden) / "tokenizer_corpus.json"));
  const nlohmann::json ids = nlohmann::json::parse(
      ReadFile(std::filesystem::path(golden) / "tokenizer_families_ids.json"));
  ASSERT_TRUE(ids.contains(GetParam()));
  const nlohmann::json& expected = ids.at(GetParam());
  ASSERT_EQ(expected.size(), 300u);
  std::vector<Case> cases;
  for (size_t i = 0; i < expected.size(); ++i) {
    cases.push_back({corpus.at(i).get<std::string>(), expected.at(i).get<std::vector<int32_t>>()});
  }
  ExpectEncodes(GetParam(), **tokenizer, cases);
}

std::string FamilyTestName(const testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Families, TokenizerFamiliesTest,
                         testing::Values("llama-spm", "llama-bpe", "qwen2", "qwen35",
                                         "deepseek-llm", "deepseek-coder", "phi-3", "gpt-2"),
                         FamilyTestName);
INSTANTIATE_TEST_SUITE_P(Families, TokenizerCorpusTest,
                         testing::Values("llama-spm", "llama-bpe", "qwen2", "deepseek-llm",
                                         "deepseek-coder", "phi-3", "gpt-2"),
                         FamilyTestName);

}  // namespace
}  // namespace tpserve
