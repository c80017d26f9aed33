// Where the cluster stands in the engine's failure model (engine.h): serving, or degraded by a
// cause since a time, its requests held within the recovery grace while the group re-forms,
// waiting for what the last attempt named. Time comes from an injected clock, so that the grace
// is tested by moving the clock rather than by waiting.
//
// Not thread-safe: the engine guards it with its mutex.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tpserve {

// What clients of held requests are told: what the cluster waits for, and how much of the
// recovery grace is left.
struct RecoveryPause {
  std::string waiting_for;
  absl::Duration grace_left;
};

class RecoveryState {
 public:
  using Clock = std::function<absl::Time()>;

  RecoveryState(absl::Duration grace, Clock clock) : grace_(grace), clock_(std::move(clock)) {}

  absl::Time Now() const { return clock_(); }
  bool serving() const { return cause_.ok(); }
  // UNAVAILABLE "cluster degraded: <cause>"; OK while serving.
  const absl::Status& degraded() const { return cause_; }

  // Degrades the cluster by `cause` now; false (and nothing changes) when it is degraded
  // already: the first cause sticks.
  bool MarkDegraded(const absl::Status& cause);
  // What the re-formation waits for, as its last attempt said.
  void SetWaitingFor(std::string what) { waiting_for_ = std::move(what); }
  const std::string& waiting_for() const { return waiting_for_; }

  // Degraded, and the grace not over.
  bool WithinGrace() const;
  // What held requests fail with once the grace is over: the cause, and that the grace passed.
  absl::Status GraceExpired() const;
  // OK while serving; within the grace, the cause with how long requests are still held and what
  // for; past it, the cause.
  absl::Status Health() const;
  // Within the grace, or past it while `holding` (a re-formation attempt still runs), what to
  // tell the clients of held requests.
  std::optional<RecoveryPause> Pause(bool holding) const;

  // The group re-formed: serving again.
  struct Reformed {
    absl::Duration degraded_for;
    absl::Status cause;  // what it was degraded by
    absl::Status late;   // past the grace: what the requests held meanwhile fail with; else OK
  };
  Reformed Reform();

 private:
  const absl::Duration grace_;
  const Clock clock_;
  absl::Status cause_;  // OK while serving
  absl::Time since_;
  std::string waiting_for_;
};

}  // namespace tpserve
