#include "coordinator/recovery_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tpserve {

bool RecoveryState::MarkDegraded(const absl::Status& cause) {
  if (!cause_.ok()) return false;
  cause_ = absl::UnavailableError(absl::StrCat("cluster degraded: ", cause.message()));
  since_ = Now();
  waiting_for_ = absl::StrCat("the group to re-form after ", cause.message());
  return true;
}

bool RecoveryState::WithinGrace() const { return !cause_.ok() && Now() - since_ < grace_; }

absl::Status RecoveryState::GraceExpired() const {
  if (grace_ == absl::ZeroDuration()) return cause_;
  return absl::UnavailableError(
      absl::StrCat(cause_.message(), "; the group did not re-form within the recovery grace of ",
                   absl::FormatDuration(grace_)));
}

absl::Status RecoveryState::Health() const {
  if (!WithinGrace()) return cause_;
  const absl::Duration left = grace_ - (Now() - since_);
  return absl::UnavailableError(
      absl::StrCat(cause_.message(), "; requests in flight are held for ",
                   absl::FormatDuration(absl::Trunc(left, absl::Milliseconds(100))),
                   " more, waiting for ", waiting_for_));
}

std::optional<RecoveryPause> RecoveryState::Pause(bool holding) const {
  if (cause_.ok() || !(WithinGrace() || holding)) return std::nullopt;
  return RecoveryPause{waiting_for_, std::max(absl::ZeroDuration(), grace_ - (Now() - since_))};
}

RecoveryState::Reformed RecoveryState::Reform() {
  Reformed reformed{Now() - since_, cause_, WithinGrace() ? absl::OkStatus() : GraceExpired()};
  cause_ = absl::OkStatus();
  waiting_for_.clear();
  return reformed;
}

}  // namespace tpserve
