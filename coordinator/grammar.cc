#include "coordinator/grammar.h"

#include <dlpack/dlpack.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "coordinator/schema_keywords.h"
#include "nlohmann/json.hpp"
#include "xgrammar/xgrammar.h"

namespace tpserve {

class CompiledConstraint {
 public:
  explicit CompiledConstraint(xgrammar::CompiledGrammar grammar) : grammar(std::move(grammar)) {}
  xgrammar::CompiledGrammar grammar;
};

namespace {

using nlohmann::json;

absl::Status Invalid(const OutputConstraint& c, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(c.param, ": ", what));
}

// The choices as an EBNF alternation of string literals (JSON's escapes are the grammar's).
std::string ChoiceGrammar(const std::vector<std::string>& choices) {
  std::string ebnf = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) ebnf += " | ";
    ebnf += json(choices[i]).dump(-1, ' ', /*ensure_ascii=*/true);
  }
  return ebnf;
}

// Each token's bytes as xgrammar matches them; control and unknown tokens as "", which xgrammar
// never lets a grammar produce: only the stop tokens end the output. User-defined tokens are
// text a family added as one token (Qwen's <tool_call>), which a grammar may well ask for.
std::vector<std::string> GrammarVocabulary(const Tokenizer& tokenizer) {
  std::vector<std::string> vocab(tokenizer.vocab_size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const TokenType type = tokenizer.token_type(id);
    if (type == TokenType::kControl || type == TokenType::kUnknown) {
      continue;
    }
    vocab[id] = std::string(tokenizer.TokenBytes(id));
  }
  return vocab;
}

// xgrammar keeps a repetition count ({m}, {m,n}) in 32 bits without checking it: 2^32 + 1 becomes
// 1, and 2^31 a negative bound. Counts past INT32_MAX in a regex, a grammar or a schema's
// `pattern` are refused before it sees them.
std::optional<std::string> RepetitionBoundOverflow(absl::string_view text) {
  constexpr uint64_t kMax = std::numeric_limits<int32_t>::max();
  for (size_t open = text.find('{'); open != absl::string_view::npos;
       open = text.find('{', open + 1)) {
    size_t i = open + 1;
    bool any_digit = false;
    while (i < text.size() && (absl::ascii_isdigit(text[i]) || text[i] == ',')) {
      any_digit |= text[i] != ',';
      ++i;
    }
    if (!any_digit || i >= text.size() || text[i] != '}') continue;
    for (absl::string_view count : absl::StrSplit(text.substr(open + 1, i - open - 1), ',')) {
      // Longer than 10 digits is past the bound whatever they are.
      uint64_t value = 0;
      if (count.size() > 10 ||
          (!count.empty() && absl::SimpleAtoi(count, &value) && value > kMax)) {
        return std::string(text.substr(open, std::min<size_t>(i - open + 1, 40)));
      }
    }
  }
  return std::nullopt;
}

// The constraint behind a reasoning model's thinking, as one xgrammar structural tag: the
// thinking is any text up to "</think>" (bounded in tokens when the request set a budget), then
// the constraint's own format. Check() has judged the constraint's text.
std::string AfterThinking(const OutputConstraint& c) {
  nlohmann::ordered_json thinking = {{"type", "any_text"}};
  if (c.thinking->max_tokens >= 0) thinking["max_tokens"] = c.thinking->max_tokens;
  nlohmann::ordered_json answer;
  switch (c.kind) {
    case OutputConstraint::Kind::kNone:
      answer = {{"type", "any_text"}};
      break;
    case OutputConstraint::Kind::kJson:
      answer = {{"type", "json_schema"},
                {"json_schema", {{"type", "object"}}},
                {"max_whitespace_cnt", 1}};
      break;
    case OutputConstraint::Kind::kJsonSchema:
      answer = {{"type", "json_schema"},
                {"json_schema", nlohmann::ordered_json::parse(c.spec)},
                {"max_whitespace_cnt", 1}};
      break;
    case OutputConstraint::Kind::kRegex:
      answer = {{"type", "regex"}, {"pattern", c.spec}};
      break;
    case OutputConstraint::Kind::kChoice:
      answer = {{"type", "grammar"}, {"grammar", ChoiceGrammar(c.choices)}};
      break;
    case OutputConstraint::Kind::kGrammar:
      answer = {{"type", "grammar"}, {"grammar", c.spec}};
      break;
    case OutputConstraint::Kind::kStructuralTag:
      answer = nlohmann::ordered_json::parse(c.spec).at("format");
      break;
  }
  const nlohmann::ordered_json format = {
      {"type", "sequence"},
      {"elements",
       {{{"type", "tag"}, {"begin", c.thinking->begin}, {"content", thinking}, {"end", "</think>"}},
        answer}}};
  return nlohmann::ordered_json{{"type", "structural_tag"}, {"format", format}}.dump();
}

}  // namespace

GrammarCompiler::GrammarCompiler(const Tokenizer& tokenizer, int64_t cache_bytes, int64_t max_bytes)
    : max_bytes_(max_bytes) {
  const absl::flat_hash_set<int32_t>& eog = tokenizer.end_of_generation_ids();
  xgrammar::TokenizerInfo info(GrammarVocabulary(tokenizer), xgrammar::VocabType::RAW,
                               tokenizer.vocab_size(),
                               std::vector<int32_t>(eog.begin(), eog.end()));
  compiler_ = std::make_unique<xgrammar::GrammarCompiler>(info, /*max_threads=*/1,
                                                          /*cache_enabled=*/true, cache_bytes);
}

GrammarCompiler::~GrammarCompiler() = default;

absl::Status GrammarCompiler::Check(const OutputConstraint& c) const {
  if (static_cast<int64_t>(c.spec.size()) > max_bytes_) {
    return Invalid(c, absl::StrCat("is ", c.spec.size(), " bytes; at most ", max_bytes_,
                                   " are allowed (--max-constraint-bytes)"));
  }
  if (std::optional<std::string> bound = RepetitionBoundOverflow(c.spec)) {
    return Invalid(c, absl::StrCat("the repetition ", *bound, " is over ",
                                   std::numeric_limits<int32_t>::max()));
  }
  if (c.kind == OutputConstraint::Kind::kJsonSchema) {
    if (JsonNestingDepth(c.spec) > kMaxJsonDepth) {
      return Invalid(c, absl::StrCat("the schema nests deeper than ", kMaxJsonDepth));
    }
    const nlohmann::ordered_json schema = ParseBoundedJson<nlohmann::ordered_json>(c.spec);
    if (schema.is_discarded()) return Invalid(c, "the schema is not valid JSON");
    if (!schema.is_object() && !schema.is_boolean()) {
      return Invalid(c, "the schema must be a JSON object");
    }
    if (const std::string found = UnenforcedSchemaKeyword(schema); !found.empty()) {
      return Invalid(c, absl::StrCat("the schema's ", found, " is not supported"));
    }
  }
  if (c.kind == OutputConstraint::Kind::kChoice) {
    if (c.choices.empty()) return Invalid(c, "the list of choices is empty");
    size_t bytes = 0;
    for (const std::string& choice : c.choices) {
      if (choice.empty()) return Invalid(c, "a choice is the empty string");
      bytes += choice.size();
    }
    if (static_cast<int64_t>(bytes) > max_bytes_) {
      return Invalid(c, absl::StrCat("the choices hold ", bytes, " bytes; at most ", max_bytes_,
                                     " are allowed (--max-constraint-bytes)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarCompiler::Compile(
    const OutputConstraint& c) {
  RETURN_IF_ERROR(Check(c));
  try {
    if (c.thinking.has_value()) {
      return std::make_shared<const CompiledConstraint>(
          compiler_->CompileStructuralTag(AfterThinking(c)));
    }
    switch (c.kind) {
      case OutputConstraint::Kind::kNone:
        return Invalid(c, "no constraint");
      case OutputConstraint::Kind::kJson:
        // OpenAI's json_object: an object, with any members (strict mode would allow none).
        return std::make_shared<const CompiledConstraint>(compiler_->CompileJSONSchema(
            R"({"type": "object"})", /*any_whitespace=*/false, /*indent=*/std::nullopt,
            std::make_pair(std::string(","), std::string(":")), /*strict_mode=*/false));
      case OutputConstraint::Kind::kJsonSchema:
        return std::make_shared<const CompiledConstraint>(compiler_->CompileJSONSchema(
            c.spec, /*any_whitespace=*/false, /*indent=*/std::nullopt,
            std::make_pair(std::string(","), std::string(":")), /*strict_mode=*/true));
      case OutputConstraint::Kind::kRegex:
        return std::make_shared<const CompiledConstraint>(compiler_->CompileRegex(c.spec));
      case OutputConstraint::Kind::kChoice:
        return std::make_shared<const CompiledConstraint>(
            compiler_->CompileGrammar(ChoiceGrammar(c.choices)));
      case OutputConstraint::Kind::kGrammar:
        return std::make_shared<const CompiledConstraint>(compiler_->CompileGrammar(c.spec));
      case OutputConstraint::Kind::kStructuralTag:
        return std::make_shared<const CompiledConstraint>(compiler_->CompileStructuralTag(c.spec));
    }
  } catch (const std::exception& e) {
    // xgrammar's messages describe the input (position, rule) after a "[time] file:line: "
    // prefix, which names a path of this machine: only the description is returned.
    std::string what = e.what();
    if (const size_t source = what.find(".cc:"); source != std::string::npos) {
      if (const size_t start = what.find(": ", source); start != std::string::npos) {
        what = what.substr(start + 2);
      }
    }
    while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
    if (what.size() > 500) what = what.substr(0, 500) + "...";
    return Invalid(c, what);
  }
  return Invalid(c, "unknown constraint");
}

TokenMatcher::TokenMatcher(std::shared_ptr<const CompiledConstraint> compiled)
    : compiled_(std::move(compiled)),
      matcher_(std::make_unique<xgrammar::GrammarMatcher>(compiled_->grammar)),
      bitmask_words_((compiled_->grammar.GetTokenizerInfo().GetVocabSize() + 31) / 32) {}

TokenMatcher::~TokenMatcher() = default;

template <typename Call>
bool TokenMatcher::Guard(Call&& call) {
  if (!status_.ok()) return false;
  try {
    call();
    return true;
  } catch (const std::exception& e) {
    status_ = absl::InternalError(absl::StrCat("the grammar matcher failed: ", e.what()));
  }
  return false;
}

void TokenMatcher::FillBitmask(absl::Span<uint32_t> row) {
  int64_t shape[1] = {static_cast<int64_t>(row.size())};
  DLTensor tensor;
  tensor.data = row.data();
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = DLDataType{kDLInt, 32, 1};
  tensor.shape = shape;
  tensor.strides = nullptr;
  tensor.byte_offset = 0;
  if (!Guard([&] { matcher_->FillNextTokenBitmask(&tensor); })) {
    std::fill(row.begin(), row.end(), 0u);
  }
}

absl::Span<const uint32_t> TokenMatcher::NextMask() {
  if (!mask_fresh_) {
    mask_.assign(bitmask_words_, 0u);
    FillBitmask(absl::MakeSpan(mask_));
    mask_fresh_ = true;
  }
  return mask_;
}

bool TokenMatcher::AllowsNothing() {
  const absl::Span<const uint32_t> mask = NextMask();
  return std::all_of(mask.begin(), mask.end(), [](uint32_t word) { return word == 0; });
}

bool TokenMatcher::Accept(int32_t token) {
  mask_fresh_ = false;
  bool accepted = false;
  return Guard([&] { accepted = matcher_->AcceptToken(token); }) && accepted;
}

bool TokenMatcher::terminated() const { return status_.ok() && matcher_->IsTerminated(); }

std::string TokenMatcher::ForcedContinuation() {
  std::string forced;
  Guard([&] { forced = matcher_->FindJumpForwardString(); });
  return forced;
}

void TokenMatcher::Rollback(int num_tokens) {
  mask_fresh_ = false;
  Guard([&] { matcher_->Rollback(num_tokens); });
}

}  // namespace tpserve
