#include "worker/comm/group_arguments.h"

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::Status CheckGroupArguments(absl::string_view who, int rank, int world_size,
                                 const gloo::rendezvous::Store* store,
                                 absl::Duration connect_timeout, absl::Duration operation_timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": rank ", rank, " is not in a world of ", world_size));
  }
  if (store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": the rendezvous store is null"));
  }
  if (connect_timeout < absl::Milliseconds(1) || operation_timeout < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": timeouts must be at least 1ms (connect_timeout ",
                     absl::FormatDuration(connect_timeout), ", operation_timeout ",
                     absl::FormatDuration(operation_timeout), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckGatherCounts(absl::Span<const int64_t> counts, int world_size) {
  if (static_cast<int>(counts.size()) != world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("GatherToRoot: ", counts.size(), " counts for a world of ", world_size));
  }
  for (const int64_t count : counts) {
    if (count < 0) {
      return absl::InvalidArgumentError(absl::StrCat("GatherToRoot: negative count ", count));
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve
