// gRPC clients for the N worker ranks. Every collective-bearing call (Init, LoadShard, Step) goes
// to all ranks at once: the ranks meet inside collectives, so a call sent to one rank after
// another would deadlock. The exception is a Step to a group that relays steps, which goes to
// rank 0 alone (worker/step_relay.h). See DESIGN.md "Worker protocol" and "Failure model".
//
// Thread-safe: Step (engine thread), Heartbeat (heartbeat thread) and Shutdown may overlap.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/cluster_service.h"
#include "coordinator/load_progress.h"
#include "coordinator/lora_modules.h"
#include "grpcpp/grpcpp.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve {

// Largest gRPC message either side sends or accepts: Score logits are [positions × vocab] floats.
inline constexpr int kMaxGrpcMessageBytes = 256 << 20;

struct WorkerInitOptions {
  std::string group_id;             // fresh per group incarnation; prefixes the store keys
  std::string coordinator_address;  // where ClusterService serves, host:port
  std::string model_path;           // empty: each worker uses its own --model
  v1::Device device = v1::DEVICE_CPU;
  int64_t block_size = 16;
  int64_t kv_cache_blocks = 0;  // 0: each worker sizes its pool from kv_cache_bytes
  int64_t kv_cache_bytes = 0;   // per rank; 0: the worker's default budget
  int64_t max_num_seqs = 0;     // the scheduler's limits, for the workers' step buffers
  int64_t max_num_batched_tokens = 0;
  bool enforce_eager = false;    // CUDA: no decode graphs on any rank
  std::string draft_model_path;  // speculative decoding's draft, loaded by rank 0; empty: none
  int32_t self_spec_layers = 0;  // or the target's first this many layers as the draft; 0: none
  bool kv_cache_fp8 = false;     // the KV pool holds FP8 E4M3 codes (InitRequest.kv_cache_fp8)
  bool weights_fp8 = false;      // FP8 W8A8 linears (InitRequest.weights_fp8)
  bool relay_steps = true;       // steps to rank 0 alone where it can relay them (InitRequest)
  int32_t pipeline_size = 1;     // stages of world / this tensor-parallel ranks (InitRequest)
  std::vector<LoraModule> loras;  // the adapters every rank loads, in their slots
  // When set, what the workers hold now (LoraManager::OnWorkers), which replaces `loras` at every
  // Init: a re-formed group loads what was loaded at run time too.
  std::function<std::vector<LoraModule>()> current_loras;
  int32_t max_loras = 0;
  int32_t max_lora_rank = 64;
};

// What the ranks agreed on after LoadShard.
struct LoadedModel {
  int64_t kv_cache_blocks = 0;  // the minimum over ranks
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  uint64_t model_file_size = 0;
  std::string model_fingerprint;
  int64_t weight_bytes = 0;  // summed over ranks
};

// What the pool last learned about one rank (for AdminService).
struct RankReport {
  RegisteredWorker info;
  std::string device_name;                         // from Init
  std::optional<v1::LoadShardResponse> loaded;     // set once LoadShard succeeded
  std::optional<v1::WorkerStatusResponse> status;  // answer to the last successful heartbeat
  absl::Time status_time = absl::InfinitePast();   // when `status` arrived
  // The last heartbeat failure naming this rank, or the error the worker itself reported;
  // kept after the rank recovers.
  std::string last_error;
};

class WorkerPool {
 public:
  // `workers[i]` must be rank i. Channels connect lazily.
  explicit WorkerPool(std::vector<RegisteredWorker> workers);

  int world_size() const { return world_size_; }

  // Points each rank at its worker in `workers` (rank i at index i), with a new channel where
  // the address changed: a restarted worker registers anew, maybe elsewhere. Calls in flight keep
  // the channel they started on.
  void UpdateWorkers(const std::vector<RegisteredWorker>& workers);

  // Init on every rank at once. On failure: the first failing rank's code, message naming every
  // failing rank with its address and the worker's message.
  absl::Status Init(const WorkerInitOptions& options, absl::Duration timeout);
  // LoadShard on every rank at once, then checks that the ranks loaded the same file:
  // FAILED_PRECONDITION naming the ranks whose size or fingerprint differ from rank 0's.
  // Meanwhile, when `progress` is set, polls the ranks' Status and keeps it current.
  absl::StatusOr<LoadedModel> LoadShard(absl::Duration timeout, LoadProgress* progress = nullptr);
  // Sends `request` to every rank at once and waits for all, or to rank 0 alone when the last
  // LoadShard found that the group relays steps; returns the answer of rank 0 (of the last
  // pipeline stage: the rank that samples).
  // UNAVAILABLE naming the failing rank(s), their addresses and causes when any rank fails or
  // misses `timeout`; ranks that no longer answer Status come first, as "down". A second after the
  // first failure the calls still outstanding are cancelled, since their ranks would otherwise sit
  // in a collective waiting for the failed one.
  absl::StatusOr<v1::StepResponse> Step(const v1::StepRequest& request, absl::Duration timeout);
  // Cancels the Steps in flight, if any: the heartbeats found a rank gone, so each step returns
  // UNAVAILABLE with `cause` now instead of at its deadline; so does every Step after it until the
  // next Init (one sent meanwhile would wait for a step its ranks never ran). Several Steps may be
  // in flight at once (StepDispatcher), from different threads.
  void AbandonStep(const absl::Status& cause) const;
  // What Heartbeat requires of every rank: to answer and not report the state "failed", or
  // only to answer (a rank whose collective failed reports "failed" until the next Init).
  enum class RankCheck { kHealthy, kAnswers };
  // Status on every rank. UNAVAILABLE naming the ranks that do not answer within `timeout` or,
  // with kHealthy, report the state "failed".
  absl::Status Heartbeat(absl::Duration timeout, RankCheck check = RankCheck::kHealthy);
  // LoadAdapter / UnloadAdapter (a LoRA slot) on every rank at once; the failures by rank, with
  // the first failing rank's code (INVALID_ARGUMENT, PERMISSION_DENIED for a refused adapter).
  absl::Status LoadAdapter(int32_t slot, const std::string& path, absl::Duration timeout);
  absl::Status UnloadAdapter(int32_t slot, absl::Duration timeout);
  // Shutdown on every rank; failures are logged, not returned.
  void Shutdown(absl::Duration timeout);

  // [world_size], by rank: the LoadShard answers and the latest heartbeat of each rank.
  std::vector<RankReport> Reports() const;

 private:
  struct Rank {
    RegisteredWorker info;
    std::shared_ptr<v1::WorkerService::Stub> stub;
  };
  // Issues one call on `rank`'s stub; must arrange for `done` to run once.
  using StartCall =
      std::function<void(int rank, v1::WorkerService::StubInterface::async_interface* stub,
                         grpc::ClientContext* context, std::function<void(grpc::Status)> done)>;

  // A Step's calls while they run, for AbandonStep, and why it abandoned them, if it did.
  struct StepCalls {
    std::vector<grpc::ClientContext*> contexts;
    absl::Status abandoned;
  };

  static constexpr int kEveryRank = 0;
  // Starts a call on every rank at once, or on ranks [0, `ranks`), and waits for all of them;
  // statuses by rank (OK for a rank not called). With
  // `cancel_on_failure`, the calls still running a second after the first failure are
  // cancelled. With `step` (Step's calls), AbandonStep may cancel them, and says so in it.
  // Status on every rank: the slowest one's load progress into `progress`.
  void PollLoadProgress(LoadProgress* progress);
  std::vector<grpc::Status> CallAll(absl::Duration timeout, bool cancel_on_failure,
                                    const StartCall& start, StepCalls* step = nullptr,
                                    int ranks = kEveryRank) const;
  // The ranks whose call failed; calls we cancelled ourselves are left out when another rank
  // failed first.
  std::vector<int> FailedRanks(const std::vector<grpc::Status>& statuses) const;
  // "rank 2 (127.0.0.1:4000): UNAVAILABLE: Socket closed", with `separator` after the address.
  std::string DescribeFailure(int rank, const grpc::Status& status, absl::Duration timeout,
                              const char* separator = ": ") const;
  // DescribeFailure of every failed rank, joined by "; ".
  std::string DescribeFailures(const std::vector<grpc::Status>& statuses,
                               absl::Duration timeout) const;
  // Like DescribeFailures, but probes every rank with Status first and names the ranks that no
  // longer answer first, whether their own call failed or they were not called ("rank 1 (addr) is
  // down: UNAVAILABLE: Socket closed; ranks that failed with it: rank 0 ..."): when one rank dies
  // its peers' collectives fail too, and the dead rank is the cause.
  std::string ExplainStepFailure(const std::vector<grpc::Status>& statuses,
                                 absl::Duration timeout) const;

  // The rank's address now, for messages.
  std::string Address(int rank) const;

  const int world_size_;
  // Every rank's last LoadShard answered relays_steps: Step goes to rank 0 alone.
  std::atomic<bool> relay_steps_{false};
  // The rank that answers a step's outputs: tensor-parallel rank 0 of the last pipeline stage.
  std::atomic<int> output_rank_{0};
  // Lock order: reports_mutex_, then ranks_mutex_ (Address under reports_mutex_).
  mutable absl::Mutex ranks_mutex_;
  std::vector<Rank> ranks_ ABSL_GUARDED_BY(ranks_mutex_);  // [world_size]

  // The Steps in flight.
  mutable absl::Mutex step_mutex_;
  mutable std::vector<StepCalls*> steps_ ABSL_GUARDED_BY(step_mutex_);
  // Why AbandonStep gave the group up, until the next Init; OK: it did not.
  mutable absl::Status abandoned_ ABSL_GUARDED_BY(step_mutex_);

  mutable absl::Mutex reports_mutex_;
  // [world_size]: written by LoadShard and Heartbeat, read by Reports.
  std::vector<RankReport> reports_ ABSL_GUARDED_BY(reports_mutex_);
};

}  // namespace tpserve
