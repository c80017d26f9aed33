// Draining before a stop, so that stopping a process loses no accepted request silently.
//
// SIGTERM on the coordinator: readiness turns 503 and new requests are refused at once (a
// Service stops routing here), those in flight get --shutdown-timeout to finish, answers written
// included, and the rest end with an explicit error. SIGTERM on a worker (ClusterService.Leave):
// the same for its group, which then admits again once the group re-forms with the rank back.
#pragma once

#include "absl/time/time.h"
#include "coordinator/engine.h"
#include "coordinator/http_server.h"

namespace tpserve {

// Drains for the coordinator's own stop; the caller then stops the engine, which ends what is
// left with UNAVAILABLE "coordinator is shutting down".
void DrainForShutdown(Engine& engine, HttpServer& http, absl::Duration timeout);

// Drains for rank `rank`, which stops once this returns; true when every request in flight
// finished, false when the rest were ended with an error naming the rank.
bool DrainForLeavingRank(Engine& engine, int rank, absl::Duration timeout);

}  // namespace tpserve
