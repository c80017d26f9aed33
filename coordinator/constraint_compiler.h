// Compiles requests' output constraints off the engine thread, on a bounded pool, each within a
// deadline. A caller waits for its compile until the deadline passes or its client goes away;
// then it gets an error at once while the compile, which xgrammar cannot interrupt, runs to its
// end on the pool (its result lands in xgrammar's cache, keyed by the constraint's text, so
// that a retry of the same schema is answered from there). A compile whose caller left before a
// pool thread took it never runs. The pool's threads and its queue are bounded, so a flood of
// slow schemas delays other constrained requests (each within its own deadline) and nothing else.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/grammar.h"
#include "coordinator/output_constraint.h"
#include "model/tokenizer.h"

namespace tpserve {

struct ConstraintCompilerOptions {
  int32_t threads = 2;      // compiles that run at once
  int32_t max_queued = 64;  // compiles waiting for a thread beyond which new ones are refused
  absl::Duration timeout = absl::Seconds(10);  // --grammar-compile-timeout
  int64_t cache_bytes = int64_t{256} << 20;    // compiled grammars kept for reuse
  int64_t max_bytes = 64 << 10;                // RequestLimits::max_constraint_bytes
};

class ConstraintCompiler {
 public:
  // `tokenizer` must outlive this. The threads start with the first compile (building the
  // vocabulary's index for xgrammar takes a moment, which unconstrained servers never pay).
  ConstraintCompiler(const Tokenizer& tokenizer, ConstraintCompilerOptions options);
  ~ConstraintCompiler();  // waits for the compiles running

  // GrammarCompiler::Compile's result, or INVALID_ARGUMENT naming constraint.param when the
  // compile outlasts the timeout, CANCELLED when `client_gone` (polled while waiting; may be
  // empty) says the caller left, RESOURCE_EXHAUSTED when max_queued compiles are waiting.
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> Compile(
      const OutputConstraint& constraint, const std::function<bool()>& client_gone);

  const ConstraintCompilerOptions& options() const { return options_; }

 private:
  struct Job;
  // A pool thread: runs queued jobs until stopping.
  void Work();
  GrammarCompiler& compiler();

  const Tokenizer& tokenizer_;
  const ConstraintCompilerOptions options_;

  absl::once_flag compiler_once_;
  std::unique_ptr<GrammarCompiler> compiler_;  // made by the first job a thread runs

  absl::Mutex mutex_;
  std::deque<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace tpserve
