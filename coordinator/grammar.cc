#include "coordinator/grammar.h"

#include <dlpack/dlpack.h>

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
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

constexpr int kMaxSchemaDepth = 64;

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

}  // namespace

GrammarCompiler::GrammarCompiler(const Tokenizer& tokenizer, int64_t cache_bytes) {
  const absl::flat_hash_set<int32_t>& eog = tokenizer.end_of_generation_ids();
  xgrammar::TokenizerInfo info(GrammarVocabulary(tokenizer), xgrammar::VocabType::RAW,
                               tokenizer.vocab_size(),
                               std::vector<int32_t>(eog.begin(), eog.end()));
  compiler_ = std::make_unique<xgrammar::GrammarCompiler>(info, /*max_threads=*/1,
                                                          /*cache_enabled=*/true, cache_bytes);
}

GrammarCompiler::~GrammarCompiler() = default;

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarCompiler::Compile(
    const OutputConstraint& c) {
  if (c.spec.size() > kMaxConstraintBytes) {
    return Invalid(c, absl::StrCat("is ", c.spec.size(), " bytes; at most ", kMaxConstraintBytes));
  }
  try {
    switch (c.kind) {
      case OutputConstraint::Kind::kNone:
        return Invalid(c, "no constraint");
      case OutputConstraint::Kind::kJson:
        // OpenAI's json_object: an object, with any members (strict mode would allow none).
        return std::make_shared<const CompiledConstraint>(compiler_->CompileJSONSchema(
            R"({"type": "object"})", /*any_whitespace=*/false, /*indent=*/std::nullopt,
            std::make_pair(std::string(","), std::string(":")), /*strict_mode=*/false));
      case OutputConstraint::Kind::kJsonSchema: {
        if (JsonNestingDepth(c.spec) > kMaxSchemaDepth) {
          return Invalid(c, absl::StrCat("the schema nests deeper than ", kMaxSchemaDepth));
        }
        const json schema = json::parse(c.spec, nullptr, /*allow_exceptions=*/false);
        if (schema.is_discarded()) return Invalid(c, "the schema is not valid JSON");
        if (!schema.is_object() && !schema.is_boolean()) {
          return Invalid(c, "the schema must be a JSON object");
        }
        if (const std::string found = UnenforcedSchemaKeyword(schema); !found.empty()) {
          return Invalid(c, absl::StrCat("the schema's ", found, " is not supported"));
        }
        return std::make_shared<const CompiledConstraint>(compiler_->CompileJSONSchema(
            c.spec, /*any_whitespace=*/false, /*indent=*/std::nullopt,
            std::make_pair(std::string(","), std::string(":")), /*strict_mode=*/true));
      }
      case OutputConstraint::Kind::kRegex:
        return std::make_shared<const CompiledConstraint>(compiler_->CompileRegex(c.spec));
      case OutputConstraint::Kind::kChoice: {
        if (c.choices.empty()) return Invalid(c, "the list of choices is empty");
        size_t bytes = 0;
        for (const std::string& choice : c.choices) {
          if (choice.empty()) return Invalid(c, "a choice is the empty string");
          bytes += choice.size();
        }
        if (bytes > kMaxConstraintBytes) {
          return Invalid(
              c, absl::StrCat("the choices hold ", bytes, " bytes; at most ", kMaxConstraintBytes));
        }
        return std::make_shared<const CompiledConstraint>(
            compiler_->CompileGrammar(ChoiceGrammar(c.choices)));
      }
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
  matcher_->FillNextTokenBitmask(&tensor);
}

bool TokenMatcher::Accept(int32_t token) { return matcher_->AcceptToken(token); }

bool TokenMatcher::terminated() const { return matcher_->IsTerminated(); }

std::string TokenMatcher::ForcedContinuation() { return matcher_->FindJumpForwardString(); }

void TokenMatcher::Rollback(int num_tokens) { matcher_->Rollback(num_tokens); }

}  // namespace tpserve
