// Re-forms the workers' collective group after a failure (DESIGN.md "Failure model"): once
// every rank is registered and answers, Init with a fresh group id (new Gloo or NCCL rendezvous)
// and LoadShard, checking that the ranks still hold the model and the KV capacity the engine was
// started with. A rank that survived keeps its loaded shard; a restarted one loads it again.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/cluster_service.h"
#include "coordinator/worker_pool.h"

namespace tpserve {

// A fresh group id: 16 random hex digits. Store keys are prefixed by it, so a re-formed group
// never reads an old rendezvous.
std::string NewGroupId();

class GroupReformer {
 public:
  // `init` is the start-up Init (its group id is replaced each attempt); `serving` what the
  // start-up LoadShard returned. `cluster` and `pool` must outlive the reformer.
  GroupReformer(ClusterServiceImpl* cluster, WorkerPool* pool, WorkerInitOptions init,
                LoadedModel serving, absl::Duration init_timeout, absl::Duration load_timeout);

  // One attempt; OK when the group serves again. UNAVAILABLE while a rank is missing or does
  // not answer (nothing is sent to the others then, so their execution threads stay free);
  // FAILED_PRECONDITION when the ranks now hold another model or fewer KV blocks than the
  // coordinator's pool; otherwise Init's or LoadShard's error.
  absl::Status Reform();

 private:
  ClusterServiceImpl* const cluster_;
  WorkerPool* const pool_;
  WorkerInitOptions init_;
  const LoadedModel serving_;
  const absl::Duration init_timeout_;
  const absl::Duration load_timeout_;
};

}  // namespace tpserve
