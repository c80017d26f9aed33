#include "coordinator/graceful_drain.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "coordinator";

int32_t InFlight(const Engine& engine) {
  const EngineStats stats = engine.stats();
  return stats.num_running + stats.num_waiting;
}

}  // namespace

void DrainForShutdown(Engine& engine, HttpServer& http, absl::Duration timeout) {
  const int32_t in_flight = engine.Drain(
      "the server is shutting down: it finishes the requests it has and accepts no new ones");
  LogInfo(kLog, "shutting down: %d requests in flight get up to %s to finish (--shutdown-timeout)",
          in_flight, absl::FormatDuration(timeout));
  const absl::Time deadline = absl::Now() + timeout;
  if (engine.WaitIdle(deadline) && http.WaitIdle(deadline)) {
    LogInfo(kLog, "every request in flight finished");
    return;
  }
  LogWarning(kLog, "%d requests still in flight after --shutdown-timeout: they end with an error",
             InFlight(engine));
}

bool DrainForLeavingRank(Engine& engine, int rank, absl::Duration timeout) {
  const int32_t in_flight = engine.Drain(
      absl::StrCat("rank ", rank,
                   " is shutting down: the cluster finishes the requests it has and accepts no "
                   "new ones until the rank is back"),
      /*until_reformed=*/true);
  LogInfo(kLog, "rank %d is leaving: %d requests in flight get up to %s to finish", rank, in_flight,
          absl::FormatDuration(timeout));
  if (engine.WaitIdle(absl::Now() + timeout)) {
    LogInfo(kLog, "rank %d may stop: every request in flight finished", rank);
    return true;
  }
  LogWarning(kLog, "rank %d is leaving: %d requests still in flight end with an error", rank,
             InFlight(engine));
  engine.FailInFlight(absl::UnavailableError(
      absl::StrCat("rank ", rank, " shut down before this request finished (--shutdown-timeout)")));
  engine.WaitIdle(absl::Now() + absl::Seconds(5));
  return false;
}

}  // namespace tpserve
