// What every CPU communicator's Create checks before it joins a group.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gloo {
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace tpserve {

// INVALID_ARGUMENT, naming `who` ("GlooCommunicator"), unless `rank` is in [0, world_size), the
// store is set and both timeouts are at least 1 ms (Gloo reads 0 ms as "no timeout").
absl::Status CheckGroupArguments(absl::string_view who, int rank, int world_size,
                                 const gloo::rendezvous::Store* store,
                                 absl::Duration connect_timeout, absl::Duration operation_timeout);

}  // namespace tpserve
