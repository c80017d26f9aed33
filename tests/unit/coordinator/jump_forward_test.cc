// JumpForward on SmolLM2's tokenizer (byte-level BPE, checked against llama.cpp's elsewhere) and
// xgrammar's matcher: what a jump appends must be the tokenizer's own tokenization of the sampled
// token's text and the forced text, with the sampled token replaced when the forced text merges
// into it and the last token left to sampling when a longer token could start with it.
#include "coordinator/jump_forward.h"

#include <memory>
#include <string>
#include <vector>

#include "coordinator/grammar.h"
#include "gtest/gtest.h"
#include "tests/unit/coordinator/bundled_model.h"

namespace tpserve {
namespace {

class JumpForwardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = BundledTokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    compiler_ = new GrammarCompiler(*tokenizer_, int64_t{64} << 20, int64_t{64} << 10);
    jump_ = new JumpForward(*tokenizer_);
  }

  static std::unique_ptr<TokenMatcher> Matcher(OutputConstraint::Kind kind, std::string spec,
                                               std::vector<std::string> choices = {}) {
    OutputConstraint constraint;
    constraint.kind = kind;
    constraint.spec = std::move(spec);
    constraint.choices = std::move(choices);
    constraint.param = "test";
    auto compiled = compiler_->Compile(constraint);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    return std::make_unique<TokenMatcher>(*compiled);
  }

  static int32_t Token(const std::string& text) {
    auto ids = tokenizer_->Encode(text, /*parse_special=*/false);
    EXPECT_TRUE(ids.ok() && ids->size() == 1) << "'" << text << "' is not one token";
    return ids.ok() && !ids->empty() ? ids->front() : -1;
  }

  static std::string Bytes(const std::vector<int32_t>& ids) {
    std::string text;
    for (int32_t id : ids) text += tokenizer_->TokenBytes(id);
    return text;
  }

  // By a scan of the whole vocabulary (JumpForward searches a sorted copy).
  static bool StrictPrefixOfAnother(std::string_view bytes) {
    for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
      const std::string_view other = tokenizer_->TokenBytes(id);
      const TokenType type = tokenizer_->token_type(id);
      if ((type == TokenType::kNormal || type == TokenType::kByte) && other.size() > bytes.size() &&
          other.substr(0, bytes.size()) == bytes) {
        return true;
      }
    }
    return false;
  }

  static std::vector<uint32_t> Mask(TokenMatcher& matcher) {
    std::vector<uint32_t> row(matcher.bitmask_words());
    matcher.FillBitmask(absl::MakeSpan(row));
    return row;
  }

  static const Tokenizer* tokenizer_;
  static GrammarCompiler* compiler_;
  static JumpForward* jump_;
};

const Tokenizer* JumpForwardTest::tokenizer_ = nullptr;
GrammarCompiler* JumpForwardTest::compiler_ = nullptr;
JumpForward* JumpForwardTest::jump_ = nullptr;

constexpr char kKeysSchema[] =
    R"({"type":"object","properties":{"customer_shipping_address":{"type":"string"}},)"
    R"("required":["customer_shipping_address"],"additionalProperties":false})";

TEST_F(JumpForwardTest, ReplacesTheBoundaryToken) {
  std::unique_ptr<TokenMatcher> matcher = Matcher(OutputConstraint::Kind::kJsonSchema, kKeysSchema);
  const int32_t brace = Token("{");
  ASSERT_TRUE(matcher->Accept(brace));
  const std::string forced = R"("customer_shipping_address":")";
  ASSERT_EQ(matcher->ForcedContinuation(), forced);

  const std::vector<int32_t> jump = jump_->Extend(*matcher, brace, kMaxJumpForwardTokens);
  // `{"` is one token of this vocabulary: the sampled `{` gives way to it.
  ASSERT_FALSE(jump.empty());
  EXPECT_NE(jump.front(), brace);
  EXPECT_EQ(tokenizer_->TokenBytes(jump.front()), "{\"");
  // The whole text as the tokenizer writes it; its last token (`":"`) begins no longer token,
  // so it is appended too and nothing is left forced.
  auto whole = tokenizer_->Encode("{" + forced, /*parse_special=*/false);
  ASSERT_TRUE(whole.ok());
  ASSERT_FALSE(StrictPrefixOfAnother(tokenizer_->TokenBytes(whole->back())));
  EXPECT_EQ(jump, *whole);
  EXPECT_EQ(matcher->ForcedContinuation(), "");
}

TEST_F(JumpForwardTest, KeepsTheSampledTokenAndLeavesAnOpenEndedLastTokenToSampling) {
  std::unique_ptr<TokenMatcher> matcher =
      Matcher(OutputConstraint::Kind::kRegex, "x( order_number_is )[0-9]+");
  const int32_t x = Token("x");
  ASSERT_TRUE(matcher->Accept(x));
  const std::vector<int32_t> jump = jump_->Extend(*matcher, x, kMaxJumpForwardTokens);
  auto whole = tokenizer_->Encode("x order_number_is ", /*parse_special=*/false);
  ASSERT_TRUE(whole.ok());
  ASSERT_EQ(whole->front(), x);
  // The text ends in " ", which begins many longer tokens (" 1", " 42"…): the digits that follow
  // may merge with it, so it is left to sampling.
  const std::string last(tokenizer_->TokenBytes(whole->back()));
  ASSERT_EQ(last, " ");
  ASSERT_TRUE(StrictPrefixOfAnother(last));
  EXPECT_EQ(jump, std::vector<int32_t>(whole->begin(), whole->end() - 1));
  EXPECT_EQ(Bytes(jump), "x order_number_is");
  EXPECT_EQ(matcher->ForcedContinuation(), " ");
}

TEST_F(JumpForwardTest, NoJumpWhereTheConstraintLeavesAChoice) {
  std::unique_ptr<TokenMatcher> matcher = Matcher(OutputConstraint::Kind::kJsonSchema, kKeysSchema);
  for (const char* piece : {"{\"", "customer", "_sh", "ipping", "_address", "\":\""}) {
    auto ids = tokenizer_->Encode(piece, /*parse_special=*/false);
    ASSERT_TRUE(ids.ok());
    for (int32_t id : *ids) ASSERT_TRUE(matcher->Accept(id)) << piece;
  }
  const int32_t last = *tokenizer_->Encode("\":\"", false)->rbegin();
  const std::vector<uint32_t> before = Mask(*matcher);
  EXPECT_TRUE(jump_->Extend(*matcher, last, kMaxJumpForwardTokens).empty());
  EXPECT_EQ(Mask(*matcher), before);
}

TEST_F(JumpForwardTest, NoJumpIntoTheMiddleOfACharacter) {
  // Both choices start with the same UTF-8 lead byte: the forced text ends inside a character.
  std::unique_ptr<TokenMatcher> matcher =
      Matcher(OutputConstraint::Kind::kChoice, "", {"a\xC3\xA9", "a\xC3\xA8"});
  const int32_t a = Token("a");
  ASSERT_TRUE(matcher->Accept(a));
  ASSERT_EQ(matcher->ForcedContinuation(), "\xC3");
  const std::vector<uint32_t> before = Mask(*matcher);
  EXPECT_TRUE(jump_->Extend(*matcher, a, kMaxJumpForwardTokens).empty());
  EXPECT_EQ(Mask(*matcher), before);
}

}  // namespace
}  // namespace tpserve
