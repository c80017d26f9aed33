// Engine's failure model (engine.h): marking the cluster degraded, holding the requests in flight
// within the recovery grace, re-forming the group and resuming or failing what was held.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/check.h"
#include "common/logging.h"
#include "coordinator/engine.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "engine";

}  // namespace

void Engine::MarkDegraded(const absl::Status& cause) {
  TP_CHECK(!cause.ok());
  absl::Status degraded;
  {
    absl::MutexLock lock(&mutex_);
    if (!recovery_state_.MarkDegraded(cause)) return;
    degraded = recovery_state_.degraded();
    LogError(kLog, "%s", degraded.message());
  }
  // A step waiting on a rank that is gone would hold its requests until the step deadline.
  pool_->AbandonStep(degraded);
}

void Engine::SetGroupReformer(std::function<absl::Status()> reform) { reform_ = std::move(reform); }

bool Engine::TryReform() {
  const absl::Status status = reform_();
  if (!status.ok()) {
    if (status.ToString() != last_reform_error_) {
      LogWarning(kLog, "the collective group is not re-formed yet: %s", status.ToString());
      last_reform_error_ = status.ToString();
      absl::MutexLock lock(&mutex_);
      recovery_state_.SetWaitingFor(
          std::string(absl::StripPrefix(status.message(), "waiting for ")));
    }
    return false;
  }
  last_reform_error_.clear();
  // A restarted rank lost its KV pool, and the step ids restart with the group.
  cache_->EvictAll();
  step_id_ = 0;
  RecoveryState::Reformed reformed;
  absl::Time now;
  {
    absl::MutexLock lock(&mutex_);
    now = recovery_state_.Now();
    reformed = recovery_state_.Reform();
    LogInfo(kLog, "the collective group is re-formed after %.2f s: serving again (was %s)",
            absl::ToDoubleSeconds(reformed.degraded_for), reformed.cause.message());
    if (undrain_when_reformed_) {
      LogInfo(kLog, "undrained: the rank that left is back");
      draining_ = false;
      undrain_when_reformed_ = false;
    }
  }
  ++recovery_.recoveries;
  if (Metrics* metrics = metrics_.load(); metrics != nullptr) {
    metrics->ObserveRecoveryTime(absl::ToDoubleSeconds(reformed.degraded_for));
  }
  if (!reformed.late.ok()) FailHeld(reformed.late);
  ResumeHeld(now);
  return true;
}

absl::Status Engine::health() const {
  absl::MutexLock lock(&mutex_);
  return HealthLocked();
}

absl::Status Engine::HealthLocked() const {
  if (stopping_) return absl::UnavailableError("coordinator is shutting down");
  return recovery_state_.Health();
}

std::optional<Engine::Pause> Engine::pause() const {
  absl::MutexLock lock(&mutex_);
  if (stopping_) return std::nullopt;
  return recovery_state_.Pause(holding_.load());
}

bool Engine::AwaitServing(absl::Time deadline) const {
  absl::MutexLock lock(&mutex_);
  auto serving = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return stopping_ || recovery_state_.serving();
  };
  return mutex_.AwaitWithDeadline(absl::Condition(&serving), deadline) && !stopping_;
}

void Engine::HoldAll(const absl::Status& cause) {
  DropCancelled();
  FailRepeatedlyHeld(cause);
  scheduler_.RequeueAll();
  holding_ = true;
  std::string waiting_for;
  absl::Time now;
  {
    absl::MutexLock lock(&mutex_);
    waiting_for = recovery_state_.waiting_for();
    now = recovery_state_.Now();
  }
  for (const std::unique_ptr<Sequence>& seq : scheduler_.waiting()) {
    if (seq->held_since != absl::InfinitePast()) continue;
    seq->held_since = now;
    ++recovery_.requests_held;
    LogInfo(kLog, "request %d: sample %d held until the group re-forms, %d tokens to recompute",
            seq->request_id, seq->sample, seq->tokens.size());
  }
  // Before the re-formation attempt, which may take long: the queue limit, tpctl and /metrics
  // count the held requests meanwhile, and their clients hear why nothing comes.
  PublishStats();
  for (const std::unique_ptr<Sequence>& seq : scheduler_.waiting()) {
    if (seq->handle != nullptr) seq->handle->Pause(waiting_for);
  }
}

void Engine::FailRepeatedlyHeld(const absl::Status& cause) {
  for (const std::unique_ptr<Sequence>& seq : scheduler_.running()) ++seq->holds;
  const int32_t limit = options_.max_request_holds;
  for (std::unique_ptr<Sequence>& seq :
       scheduler_.TakeIf([limit](const Sequence& s) { return s.holds > limit; })) {
    Fail(*seq, absl::InternalError(absl::StrCat("the steps this request ran in failed ", seq->holds,
                                                " times (the last: ", cause.message(),
                                                "); it is not held again")));
  }
}

void Engine::ResumeHeld(absl::Time now) {
  for (const std::unique_ptr<Sequence>& seq : scheduler_.waiting()) {
    if (seq->held_since == absl::InfinitePast()) continue;
    ++recovery_.requests_resumed;
    LogInfo(kLog, "request %d: sample %d resumed after %.2f s held, %d tokens to recompute",
            seq->request_id, seq->sample, absl::ToDoubleSeconds(now - seq->held_since),
            seq->tokens.size());
    seq->held_since = absl::InfinitePast();
  }
  holding_ = false;
}

void Engine::FailHeld(const absl::Status& status) {
  for (std::unique_ptr<Sequence>& seq :
       scheduler_.TakeIf([](const Sequence& s) { return s.held_since != absl::InfinitePast(); })) {
    Fail(*seq, status);
  }
}

}  // namespace tpserve
