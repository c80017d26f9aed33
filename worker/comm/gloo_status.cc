#include "worker/comm/gloo_status.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace tpserve {

absl::StatusCode CodeForGlooError(absl::string_view what) {
  const std::string lower = absl::AsciiStrToLower(what);
  return absl::StrContains(lower, "timeout") || absl::StrContains(lower, "timed out")
             ? absl::StatusCode::kDeadlineExceeded
             : absl::StatusCode::kUnavailable;
}

}  // namespace tpserve
