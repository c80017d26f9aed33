// Structured output through xgrammar: a request's OutputConstraint compiled over the served
// vocabulary (GrammarCompiler, on the caller's thread so that the engine thread never waits for
// a compile), and one TokenMatcher per constrained sample, which the engine thread asks for each
// step's allow-list (the worker's token_bitmask row) and tells the token that was sampled.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "coordinator/output_constraint.h"
#include "model/tokenizer.h"

namespace xgrammar {
class CompiledGrammar;
class GrammarCompiler;
class GrammarMatcher;
}  // namespace xgrammar

namespace tpserve {

// A compiled constraint; shared by the samples of a request (and xgrammar's cache).
class CompiledConstraint;

// Longest schema, regex or grammar text a request may send: compiling is bounded by its size.
inline constexpr size_t kMaxConstraintBytes = 64 * 1024;

class GrammarCompiler {
 public:
  // `cache_bytes` bounds the compiled grammars kept for reuse (least recently used go first).
  GrammarCompiler(const Tokenizer& tokenizer, int64_t cache_bytes);
  ~GrammarCompiler();

  // INVALID_ARGUMENT naming constraint.param and what is wrong: a schema that is not JSON or uses
  // a keyword the engine would not enforce, a regex or grammar that does not parse, an empty
  // choice list, a text over kMaxConstraintBytes.
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> Compile(
      const OutputConstraint& constraint);

 private:
  std::unique_ptr<xgrammar::GrammarCompiler> compiler_;
};

class TokenMatcher {
 public:
  explicit TokenMatcher(std::shared_ptr<const CompiledConstraint> compiled);
  ~TokenMatcher();

  // Words of one bitmask row: ceil(vocab / 32).
  int64_t bitmask_words() const { return bitmask_words_; }
  // Sets `row` (bitmask_words() words) to the tokens that may come next: bit t % 32 of word
  // t / 32. End-of-generation tokens are allowed only where the constraint may end.
  void FillBitmask(absl::Span<uint32_t> row);
  // Advances over the sampled token; false when the constraint does not allow it.
  bool Accept(int32_t token);
  // An end-of-generation token was accepted: the output is complete.
  bool terminated() const;
  // The bytes the constraint allows as the only continuation from here (empty when there is a
  // choice), for jump-forward decoding.
  std::string ForcedContinuation();
  // Undoes the last `num_tokens` accepted tokens.
  void Rollback(int num_tokens);

 private:
  std::shared_ptr<const CompiledConstraint> compiled_;
  std::unique_ptr<xgrammar::GrammarMatcher> matcher_;
  int64_t bitmask_words_;
};

}  // namespace tpserve
