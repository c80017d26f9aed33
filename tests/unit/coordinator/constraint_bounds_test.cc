// What bounds a request's output constraint and its allow-list, on SmolLM2's vocabulary and the
// real xgrammar: the compile pool's deadline and its client check (ConstraintCompiler), the
// repetition counts xgrammar would wrap, the jump-forward bounds (the 4 KiB search built into
// xgrammar, JumpForward's token limit) on a schema that forces an endless text, and the sample
// mask (UpdateSampleMask) against a mask computed here token by token.
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "coordinator/constraint_compiler.h"
#include "coordinator/grammar.h"
#include "coordinator/jump_forward.h"
#include "coordinator/sample_mask.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/coordinator/bundled_model.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

// Six `.{0,127}` under xgrammar's unrolling threshold: seconds to compile on this vocabulary.
constexpr char kSlowSchema[] =
    R"({"type":"string","pattern":"^.{0,127}-.{0,127}-.{0,127}-.{0,127}-.{0,127}-.{0,127}-$"})";
constexpr char kSelfReference[] =
    R"({"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"],"additionalProperties":false})";

OutputConstraint Constraint(OutputConstraint::Kind kind, std::string spec) {
  OutputConstraint c;
  c.kind = kind;
  c.spec = std::move(spec);
  c.param = "response_format";
  return c;
}

class ConstraintBoundsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = BundledTokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    compiler_ = new GrammarCompiler(*tokenizer_, int64_t{64} << 20, int64_t{64} << 10);
  }
  static std::shared_ptr<const CompiledConstraint> Compile(OutputConstraint::Kind kind,
                                                           std::string spec) {
    auto compiled = compiler_->Compile(Constraint(kind, std::move(spec)));
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    return compiled.ok() ? *compiled : nullptr;
  }

  static const Tokenizer* tokenizer_;
  static GrammarCompiler* compiler_;
};

const Tokenizer* ConstraintBoundsTest::tokenizer_ = nullptr;
GrammarCompiler* ConstraintBoundsTest::compiler_ = nullptr;

TEST_F(ConstraintBoundsTest, ACompilePastTheDeadlineIsA400AndTheCallerGoesAtOnce) {
  ConstraintCompilerOptions options;
  options.timeout = absl::Milliseconds(200);
  ConstraintCompiler pool(*tokenizer_, options);
  const absl::Time start = absl::Now();
  auto slow = pool.Compile(Constraint(OutputConstraint::Kind::kJsonSchema, kSlowSchema), {});
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(slow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(slow.status().message()), HasSubstr("--grammar-compile-timeout"));
  // A caller whose client left is let go at the next check.
  const absl::Time again = absl::Now();
  auto gone = pool.Compile(Constraint(OutputConstraint::Kind::kRegex, "^.{0,127}-.{0,127}-.{0,127}$"),
                           [] { return true; });
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - again, absl::Seconds(1));
  // A quick constraint still compiles beside them.
  ConstraintCompilerOptions roomy;
  ConstraintCompiler other(*tokenizer_, roomy);
  EXPECT_TRUE(other.Compile(Constraint(OutputConstraint::Kind::kRegex, "yes|no"), {}).ok());
}

TEST_F(ConstraintBoundsTest, RepetitionCountsXgrammarWouldWrapAreRefused) {
  for (const std::string spec : {"a{0,4294967296}", "a{4294967297}", "(ab){2147483648}",
                                 "a{1,99999999999}"}) {
    auto compiled = compiler_->Compile(Constraint(OutputConstraint::Kind::kRegex, spec));
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_THAT(std::string(compiled.status().message()), HasSubstr("is over 2147483647")) << spec;
  }
  auto in_schema = compiler_->Compile(Constraint(
      OutputConstraint::Kind::kJsonSchema, R"({"type":"string","pattern":"^a{4294967297}$"})"));
  EXPECT_EQ(in_schema.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(compiler_->Compile(Constraint(OutputConstraint::Kind::kRegex, "a{2,2147483647}")).ok());
}

TEST_F(ConstraintBoundsTest, AnEndlessForcedTextIsSearchedAndJumpedWithinBounds) {
  auto compiled = Compile(OutputConstraint::Kind::kJsonSchema, kSelfReference);
  ASSERT_NE(compiled, nullptr);
  TokenMatcher matcher(compiled);
  const std::string forced = matcher.ForcedContinuation();
  EXPECT_EQ(forced.size(), TPSERVE_JUMP_FORWARD_MAX_BYTES);
  EXPECT_EQ(forced.substr(0, 10), "{\"a\":{\"a\":");
  // A jump after the first `{` stops at its limit, every token accepted.
  const int32_t brace = tokenizer_->Encode("{", false)->front();
  ASSERT_TRUE(matcher.Accept(brace));
  JumpForward jump(*tokenizer_);
  const std::vector<int32_t> tokens = jump.Extend(matcher, brace, 7);
  EXPECT_EQ(tokens.size(), 7u);
  std::string text;
  for (int32_t id : tokens) text += tokenizer_->TokenBytes(id);
  EXPECT_EQ(text, std::string("{\"a\":{\"a\":{\"a\":{\"a\":").substr(0, text.size()));
  EXPECT_FALSE(matcher.AllowsNothing());
}

TEST_F(ConstraintBoundsTest, ADeadEndAndAnEmptyLanguageAllowNothing) {
  TokenMatcher dead(Compile(OutputConstraint::Kind::kGrammar,
                            R"(root ::= "a" [^\u0000-\U0010FFFF])"));
  EXPECT_FALSE(dead.AllowsNothing());
  ASSERT_TRUE(dead.Accept(tokenizer_->Encode("a", false)->front()));
  EXPECT_TRUE(dead.AllowsNothing());
  EXPECT_TRUE(dead.status().ok());
  TokenMatcher empty(Compile(OutputConstraint::Kind::kGrammar, R"(root ::= [^\u0000-\U0010FFFF])"));
  EXPECT_TRUE(empty.AllowsNothing());
}

// The mask's bits against the restrictions, each token judged on its own here.
TEST_F(ConstraintBoundsTest, TheSampleMaskIsEveryRestrictionAtOnce) {
  const int64_t vocab = tokenizer_->vocab_size();
  const absl::flat_hash_set<int32_t>& eog = tokenizer_->end_of_generation_ids();
  // Ordinary tokens, far from SmolLM2's special ones (0..16, some of them ends of generation).
  const int32_t a = 1005, b = 1006, stop = 1007, bad = 1008, c = 1009;
  Sequence seq;
  seq.tokens = {1, 2, 3, 1040, 1041};
  seq.prompt_len = 3;  // 1040, 1041 generated
  seq.params.min_tokens = 4;
  seq.params.stop_token_ids = {stop};
  seq.params.allowed_token_ids = {a, b, stop, bad, c, *eog.begin()};
  seq.params.bad_words_ids = {{1041, b}, {bad}, {1039, c}};
  ASSERT_TRUE(UpdateSampleMask(seq, eog, vocab).ok());
  auto allowed = [&](int32_t t) { return (seq.mask[t / 32] >> (t % 32)) & 1u; };
  for (int32_t t = 0; t < vocab; ++t) {
    // a and c only: b ends the bad word "1041 b", `bad` is one, the stop id and the end of
    // generation come before min_tokens, c would end "1039 c" only after 1039.
    EXPECT_EQ(allowed(t), t == a || t == c) << t;
  }
  // Past min_tokens the end and the stop id may come.
  seq.tokens.insert(seq.tokens.end(), {1042, 1043});
  ASSERT_TRUE(UpdateSampleMask(seq, eog, vocab).ok());
  EXPECT_TRUE(allowed(stop) && allowed(*eog.begin()) && allowed(b));
  // Nothing left: the field that took the last token is named.
  seq.params.allowed_token_ids = {bad};
  const absl::Status none = UpdateSampleMask(seq, eog, vocab);
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(none.message()), HasSubstr("bad_words"));
  // No restriction: no mask.
  Sequence free;
  free.tokens = {1};
  free.prompt_len = 1;
  ASSERT_TRUE(UpdateSampleMask(free, eog, vocab).ok());
  EXPECT_TRUE(free.mask.empty());
}

}  // namespace
}  // namespace tpserve
