// What every CPU communicator checks of its arguments: Create before it joins a group, and
// GatherToRoot.
#pragma once

#include <gloo/rendezvous/store.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace tpserve {

// INVALID_ARGUMENT, naming `who` ("GlooCommunicator"), unless `rank` is in [0, world_size), the
// store is set and both timeouts are at least 1 ms (Gloo reads 0 ms as "no timeout").
absl::Status CheckGroupArguments(absl::string_view who, int rank, int world_size,
                                 const gloo::rendezvous::Store* store,
                                 absl::Duration connect_timeout, absl::Duration operation_timeout);

// INVALID_ARGUMENT unless GatherToRoot has one count per rank and none is negative.
absl::Status CheckGatherCounts(absl::Span<const int64_t> counts, int world_size);

}  // namespace tpserve
