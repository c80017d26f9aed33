#include "coordinator/group_reformer.h"

#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "reform";
// How long every rank has to answer Status before an attempt goes ahead.
constexpr absl::Duration kProbeTimeout = absl::Seconds(2);

}  // namespace

std::string NewGroupId() {
  std::random_device random;
  return absl::StrFormat("%08x%08x", random(), random());
}

GroupReformer::GroupReformer(ClusterServiceImpl* cluster, WorkerPool* pool, WorkerInitOptions init,
                             LoadedModel serving, absl::Duration init_timeout,
                             absl::Duration load_timeout)
    : cluster_(cluster),
      pool_(pool),
      init_(std::move(init)),
      serving_(std::move(serving)),
      init_timeout_(init_timeout),
      load_timeout_(load_timeout) {}

absl::Status GroupReformer::Reform() {
  const std::vector<RegisteredWorker> workers = cluster_->Registered();
  if (static_cast<int>(workers.size()) != pool_->world_size()) {
    const std::string missing = cluster_->MissingRanks();
    return absl::UnavailableError(absl::StrCat(
        "waiting for rank", absl::StrContains(missing, ",") ? "s " : " ", missing, " to register"));
  }
  pool_->UpdateWorkers(workers);
  // A dead rank would leave the others waiting in the rendezvous until it times out. The
  // survivors report "failed" (their communicator broke with the step): Init is the repair.
  if (absl::Status alive = pool_->Heartbeat(kProbeTimeout, WorkerPool::RankCheck::kAnswers);
      !alive.ok()) {
    return absl::UnavailableError(
        absl::StrCat("waiting for every rank to answer: ", alive.message()));
  }
  cluster_->ClearGroup(init_.group_id);  // the ended incarnation's rendezvous
  init_.group_id = NewGroupId();
  LogInfo(kLog, "every rank answers: Init with group %s", init_.group_id);
  if (absl::Status s = pool_->Init(init_, init_timeout_); !s.ok()) return s;
  absl::StatusOr<LoadedModel> loaded = pool_->LoadShard(load_timeout_);
  if (!loaded.ok()) return loaded.status();
  if (loaded->model_fingerprint != serving_.model_fingerprint ||
      loaded->model_file_size != serving_.model_file_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ranks now hold another model (fingerprint ", loaded->model_fingerprint,
                     ", serving ", serving_.model_fingerprint, "): restart the coordinator"));
  }
  if (loaded->kv_cache_blocks < serving_.kv_cache_blocks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ranks now hold ", loaded->kv_cache_blocks, " KV blocks, fewer than the ",
        serving_.kv_cache_blocks, " the coordinator schedules: restart the coordinator"));
  }
  return absl::OkStatus();
}

}  // namespace tpserve
