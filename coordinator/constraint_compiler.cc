#include "coordinator/constraint_compiler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "coordinator/openai_error.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "grammar";
// How often a waiting caller asks whether its client is still there.
constexpr absl::Duration kClientPoll = absl::Milliseconds(100);

}  // namespace

struct ConstraintCompiler::Job {
  OutputConstraint constraint;
  // Guarded by ConstraintCompiler::mutex_.
  bool abandoned = false;  // the caller stopped waiting: a job not started is skipped
  bool done = false;
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> result;
};

ConstraintCompiler::ConstraintCompiler(const Tokenizer& tokenizer,
                                       ConstraintCompilerOptions options)
    : tokenizer_(tokenizer), options_(options) {}

ConstraintCompiler::~ConstraintCompiler() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
    threads.swap(threads_);
  }
  for (std::thread& thread : threads) thread.join();
}

GrammarCompiler& ConstraintCompiler::compiler() {
  absl::call_once(compiler_once_, [this] {
    compiler_ =
        std::make_unique<GrammarCompiler>(tokenizer_, options_.cache_bytes, options_.max_bytes);
  });
  return *compiler_;
}

void ConstraintCompiler::Work() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mutex_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return stopping_ || !queue_.empty();
      };
      mutex_.Await(absl::Condition(&ready));
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      if (job->abandoned) continue;
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<std::shared_ptr<const CompiledConstraint>> result =
        compiler().Compile(job->constraint);
    const absl::Duration took = absl::Now() - start;
    absl::MutexLock lock(&mutex_);
    if (job->abandoned) {
      LogInfo(kLog, "a %s compile its caller gave up on ended after %.2f s (%s)",
              job->constraint.param, absl::ToDoubleSeconds(took),
              result.ok() ? "kept in the cache" : "failed");
    }
    job->result = std::move(result);
    job->done = true;
  }
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> ConstraintCompiler::Compile(
    const OutputConstraint& constraint, const std::function<bool()>& client_gone) {
  auto job = std::make_shared<Job>();
  job->constraint = constraint;
  const absl::Time deadline = absl::Now() + options_.timeout;
  absl::MutexLock lock(&mutex_);
  if (stopping_) return absl::UnavailableError("coordinator is shutting down");
  if (static_cast<int32_t>(queue_.size()) >= options_.max_queued) {
    return WithParam(absl::ResourceExhaustedError(absl::StrCat(
                         constraint.param, ": ", queue_.size(),
                         " constraints are waiting to compile; retry in about a second")),
                     constraint.param);
  }
  queue_.push_back(job);
  if (static_cast<int32_t>(threads_.size()) < options_.threads) {
    threads_.emplace_back([this] {
      NameThisThread("tp-grammar");
      Work();
    });
  }
  auto done = [&job]() { return job->done; };
  while (!job->done) {
    mutex_.AwaitWithDeadline(absl::Condition(&done),
                             std::min(deadline, absl::Now() + kClientPoll));
    if (job->done) break;
    if (client_gone && client_gone()) {
      job->abandoned = true;
      return absl::CancelledError("cancelled by the client while its constraint compiled");
    }
    if (absl::Now() >= deadline) {
      job->abandoned = true;
      return WithParam(
          absl::InvalidArgumentError(absl::StrCat(
              constraint.param, ": the constraint did not compile within ",
              absl::FormatDuration(options_.timeout),
              " (--grammar-compile-timeout); simplify it (fewer optional properties, smaller "
              "repetition bounds, shorter alternations)")),
          constraint.param);
    }
  }
  return job->result;
}

}  // namespace tpserve
