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
    if (!degraded_.ok()) return;
    degraded_ = absl::UnavailableError(absl::StrCat("cluster degraded: ", cause.message()));
    degraded_since_ = absl::Now();
    waiting_for_ = absl::StrCat("the group to re-form after ", cause.message());
    LogError(kLog, "%s", degraded_.message());
    degraded = degraded_;
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
      waiting_for_ = std::string(absl::StripPrefix(status.message(), "waiting for "));
    }
    return false;
  }
  last_reform_error_.clear();
  // A restarted rank lost its KV pool, and the step ids restart with the group.
  cache_->EvictAll();
  step_id_ = 0;
  const absl::Time now = absl::Now();
  absl::Duration degraded_for;
  absl::Status late;
  {
    absl::MutexLock lock(&mutex_);
    if (!WithinGrace(now)) late = GraceExpired(degraded_);
    degraded_for = now - degraded_since_;
    LogInfo(kLog, "the collective group is re-formed after %.2f s: serving again (was %s)",
            absl::ToDoubleSeconds(degraded_for), degraded_.message());
    degraded_ = absl::OkStatus();
    waiting_for_.clear();
    if (undrain_when_reformed_) {
      LogInfo(kLog, "undrained: the rank that left is back");
      draining_ = false;
      undrain_when_reformed_ = false;
    }
  }
  ++recovery_.recoveries;
  if (Metrics* metrics = metrics_.load(); metrics != nullptr) {
    metrics->ObserveRecoveryTime(absl::ToDoubleSeconds(degraded_for));
  }
  if (!late.ok()) FailHeld(late);
  ResumeHeld(now);
  return true;
}

absl::Status Engine::GraceExpired(const absl::Status& cause) const {
  if (options_.recovery_grace == absl::ZeroDuration()) return cause;
  return absl::UnavailableError(
      absl::StrCat(cause.message(), "; the group did not re-form within the recovery grace of ",
                   absl::FormatDuration(options_.recovery_grace)));
}

bool Engine::WithinGrace(absl::Time now) const {
  return !degraded_.ok() && now - degraded_since_ < options_.recovery_grace;
}

absl::Status Engine::health() const {
  absl::MutexLock lock(&mutex_);
  return HealthLocked();
}

absl::Status Engine::HealthLocked() const {
  if (stopping_) return absl::UnavailableError("coordinator is shutting down");
  const absl::Time now = absl::Now();
  if (!WithinGrace(now)) return degraded_;
  return absl::UnavailableError(
      absl::StrCat(degraded_.message(), "; requests in flight are held for ",
                   absl::FormatDuration(absl::Trunc(
                       options_.recovery_grace - (now - degraded_since_), absl::Milliseconds(100))),
                   " more, waiting for ", waiting_for_));
}

std::optional<Engine::Pause> Engine::pause() const {
  absl::MutexLock lock(&mutex_);
  const absl::Time now = absl::Now();
  if (stopping_ || degraded_.ok() || !(WithinGrace(now) || holding_.load())) return std::nullopt;
  return Pause{waiting_for_,
               std::max(absl::ZeroDuration(), options_.recovery_grace - (now - degraded_since_))};
}

void Engine::HoldAll(const absl::Status& cause) {
  DropCancelled();
  FailRepeatedlyHeld(cause);
  scheduler_.RequeueAll();
  holding_ = true;
  const absl::Time now = absl::Now();
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
  std::string waiting_for;
  {
    absl::MutexLock lock(&mutex_);
    waiting_for = waiting_for_;
  }
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
