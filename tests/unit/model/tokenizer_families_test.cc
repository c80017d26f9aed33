// The tokenizer against llama.cpp's own tokenizer test suite: for each vocabulary family, the
// vocabulary-only GGUF and the cases llama.cpp checks it with (ggml-vocab-NAME.gguf.inp, texts
// separated by "\n__ggml_vocab_test__\n"; .out, one line of ids per text, made by the
// model's Hugging Face tokenizer). Encoded as llama.cpp's test does: no BOS, special tokens not
// parsed. The files come from the pinned llama-cpp-python sdist (scripts/fetch-llama-cpp-models.sh),
// whose directory TPSERVE_LLAMA_CPP_MODELS names; without them the test fails, it never skips.
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

class TokenizerFamiliesTest : public testing::TestWithParam<std::string> {};

TEST_P(TokenizerFamiliesTest, MatchesLlamaCppSuite) {
  const char* dir = std::getenv("TPSERVE_LLAMA_CPP_MODELS");
  ASSERT_NE(dir, nullptr) << "TPSERVE_LLAMA_CPP_MODELS is not set";
  const std::filesystem::path vocab =
      std::filesystem::path(dir) / ("ggml-vocab-" + GetParam() + ".gguf");
  ASSERT_TRUE(std::filesystem::exists(vocab))
      << vocab << " is missing: run scripts/fetch-llama-cpp-models.sh";
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(vocab.string());
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();

  const std::vector<Case> cases = ReadCases(vocab);
  ASSERT_GT(cases.size(), 20u);
  int matched = 0;
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(c.text, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    if (*ids == c.ids) {
      ++matched;
    } else {
      ADD_FAILURE() << GetParam() << " \"" << absl::CEscape(c.text) << "\"\n  expected "
                    << absl::StrJoin(c.ids, " ") << "\n  got      " << absl::StrJoin(*ids, " ");
    }
  }
  EXPECT_EQ(matched, static_cast<int>(cases.size()));
}

INSTANTIATE_TEST_SUITE_P(Families, TokenizerFamiliesTest,
                         testing::Values("llama-spm", "llama-bpe", "qwen2", "deepseek-llm",
                                         "deepseek-coder", "phi-3", "gpt-2"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace tpserve
