// Structured output through xgrammar: a request's OutputConstraint compiled over the served
// vocabulary (GrammarCompiler, run by ConstraintCompiler's pool so that the engine thread never
// waits for a compile), and one TokenMatcher per constrained sample, which the engine thread asks
// for each step's allow-list (UpdateSampleMask, the worker's token_bitmask row) and tells the
// token that was sampled.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
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

class GrammarCompiler {
 public:
  // `cache_bytes` bounds the compiled grammars kept for reuse (least recently used go first);
  // `max_bytes` the text of one constraint (RequestLimits::max_constraint_bytes).
  GrammarCompiler(const Tokenizer& tokenizer, int64_t cache_bytes, int64_t max_bytes);
  ~GrammarCompiler();

  // INVALID_ARGUMENT naming constraint.param and what is wrong: a schema that is not JSON or uses
  // a keyword the engine would not enforce, a regex or grammar that does not parse, an empty
  // choice list, a text (or all choices together) over `max_bytes`.
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> Compile(
      const OutputConstraint& constraint);

 private:
  // What Compile refuses before xgrammar sees the text.
  absl::Status Check(const OutputConstraint& constraint) const;

  std::unique_ptr<xgrammar::GrammarCompiler> compiler_;
  const int64_t max_bytes_;
};

// Not thread-safe: the engine thread owns it once the request is queued. xgrammar reports a
// broken state by throwing; a TokenMatcher catches every exception and keeps it as status(), after
// which it accepts nothing and allows nothing, so one request's grammar never reaches the engine
// thread's loop.
class TokenMatcher {
 public:
  explicit TokenMatcher(std::shared_ptr<const CompiledConstraint> compiled);
  ~TokenMatcher();

  // Words of one bitmask row: ceil(vocab / 32).
  int64_t bitmask_words() const { return bitmask_words_; }
  // Sets `row` (bitmask_words() words) to the tokens that may come next: bit t % 32 of word
  // t / 32. End-of-generation tokens are allowed only where the constraint may end.
  void FillBitmask(absl::Span<uint32_t> row);
  // The row FillBitmask writes for the current state, filled once per state.
  absl::Span<const uint32_t> NextMask();
  // No token may come next, not even an end of generation: the output cannot go on (a grammar
  // whose language ends here, or is empty). Also true once status() is not OK.
  bool AllowsNothing();
  // Advances over the sampled token; false when the constraint does not allow it.
  bool Accept(int32_t token);
  // An end-of-generation token was accepted: the output is complete.
  bool terminated() const;
  // The bytes the constraint allows as the only continuation from here (empty when there is a
  // choice), at most TPSERVE_JUMP_FORWARD_MAX_BYTES of them, for jump-forward decoding.
  std::string ForcedContinuation();
  // Undoes the last `num_tokens` accepted tokens.
  void Rollback(int num_tokens);
  // OK, or the first error xgrammar raised (INTERNAL, its message).
  const absl::Status& status() const { return status_; }

 private:
  // Runs `call` on the matcher unless an earlier call failed; records what it throws.
  template <typename Call>
  bool Guard(Call&& call);

  std::shared_ptr<const CompiledConstraint> compiled_;
  std::unique_ptr<xgrammar::GrammarMatcher> matcher_;
  int64_t bitmask_words_;
  std::vector<uint32_t> mask_;  // NextMask's row
  bool mask_fresh_ = false;     // mask_ is the current state's
  absl::Status status_;
};

}  // namespace tpserve
