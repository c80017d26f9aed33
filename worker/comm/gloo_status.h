// Gloo and its rendezvous stores (FileStore, CoordinatorStore) report failures by throwing. These
// helpers turn an exception into an absl::Status at the boundary of the classes that call them.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// DEADLINE_EXCEEDED for Gloo's timeout texts ("Timed out waiting 30000ms for recv", "Connect
// timeout", "Wait timeout for key(s)"), UNAVAILABLE for everything else (a broken or refused
// connection, an unreachable store).
absl::StatusCode CodeForGlooError(absl::string_view what);

// Runs `fn`; any exception becomes a Status whose message is `context` plus the exception text.
template <typename Fn>
absl::Status RunCatching(absl::string_view context, Fn&& fn) {
  std::string what;
  try {
    std::forward<Fn>(fn)();
    return absl::OkStatus();
  } catch (const std::exception& e) {  // gloo::Exception, gloo::EnforceNotMet, std::system_error
    what = e.what();
  } catch (...) {
    what = "unknown exception";
  }
  return absl::Status(CodeForGlooError(what), absl::StrCat(context, ": ", what));
}

}  // namespace tpserve
