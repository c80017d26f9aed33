// WorkerServer: one rank's WorkerService (DESIGN.md "Worker protocol", "Threads").
//
// gRPC threads only hand Init, LoadShard and Step to the ExecutionThread and wait, so the model,
// the KV pool, the per-sequence state and every collective are touched by that one thread, in
// arrival order. Status is answered from a separate snapshot, so heartbeats never wait behind a
// step or a rendezvous. A Step the coordinator cancels (it gave the step up) aborts the
// communicator from the waiting gRPC thread, the one call made off the execution thread, so a
// collective whose peers will not come ends at once and the next Init finds the thread free.
//
// A rank other than 0 of a group that relays steps (step_relay.h) takes them from rank 0 instead:
// after LoadShard its execution thread waits for rank 0's next step and runs it, until the group
// breaks, or Init or Stop aborts the communicator to take the thread back.
//
// Lifecycle: Init (rank, world, communicator) → LoadShard → Step (step_id 1, 2, …) → Shutdown.
// Init may come again to re-form the group: it replaces the communicator, drops every sequence
// and restarts step ids at 1; the loaded shard is kept when rank, world size, model path, block
// size and KV settings are unchanged (LoadShard then answers without reloading), else it is
// released and LoadShard must be called again.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "tpserve/v1/worker.grpc.pb.h"
#include "worker/comm/cpu_group.h"
#include "worker/comm/pipeline_links.h"
#include "worker/comm/swappable_communicator.h"
#include "worker/execution_thread.h"
#include "worker/load_policy.h"
#include "worker/model_runner.h"
#include "worker/model_runner_options.h"
#include "worker/step_relay.h"
#include "worker/worker_metrics.h"

namespace tpserve {

// Where a worker is in its lifecycle, as WorkerStatusResponse.state names it.
enum class WorkerState { kStarting, kInitialized, kLoaded, kServing, kFailed };
const char* WorkerStateName(WorkerState state);  // "starting", …, "failed"

struct WorkerServerOptions {
  int rank = 0;  // the rank this worker registers as; Init must agree
  // The model this worker serves. InitRequest.model_path may name another only under
  // `model_dir` (empty: none); anything else is refused unopened.
  std::string model_path;
  std::string model_dir;
  // The draft model (speculative decoding) InitRequest.draft_model_path may name, besides those
  // under `model_dir`; empty: none.
  std::string draft_model_path;
  // LoRA adapter folders InitRequest.lora_adapters may name, besides those under `model_dir`.
  std::vector<std::string> lora_paths;
  std::vector<std::string> lora_dirs;  // and those under these (loaded at run time)
  std::string host = "127.0.0.1";  // bound and advertised, for gRPC and for Gloo
  // How the ranks of a CPU group all-reduce: shared memory when all can map it, else Gloo.
  CpuTransport cpu_transport = CpuTransport::kAuto;
  int port = 0;  // 0: any free port
  // CPU: the KV budget when Init gives neither blocks nor bytes, grown to one full context if it
  // holds less (CUDA then fills the device up to gpu_memory_utilization).
  int64_t default_kv_cache_bytes = int64_t{256} << 20;
  int cuda_device = -1;  // --local-rank: the CUDA device ordinal; -1: rank mod visible devices
  double gpu_memory_utilization = 0.9;
  CpuWeights cpu_weights = CpuWeights::kAuto;  // --cpu-weights
};

// Both directions: a step's logits can be [tokens, vocab] floats.
inline constexpr int kMaxMessageBytes = 256 << 20;

class WorkerServer final : public v1::WorkerService::Service {
 public:
  // Binds host:port and starts serving.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerServerOptions& options);
  ~WorkerServer() override;

  const std::string& address() const { return address_; }  // "host:bound_port"
  const std::string& hostname() const { return hostname_; }

  // Blocks until the Shutdown RPC or RequestShutdown, or at most `timeout`.
  void WaitForShutdownRequest(absl::Duration timeout = absl::InfiniteDuration());
  enum class Wake { kShutdown, kSilence, kTimeout };
  // Blocks up to `timeout`, returning early when Shutdown is requested, or when a coordinator
  // that has called went `silence` without calling at all, with no call in flight: it is gone,
  // and a new one (restarted behind the same address) waits for this rank to register again.
  Wake WaitForShutdownOrSilence(absl::Duration silence, absl::Duration timeout);
  // Disarms the silence check until the coordinator's next Init or heartbeat: call before
  // registering.
  void ForgetCoordinator();
  // `by_signal`: SIGTERM or SIGINT, rather than the coordinator's Shutdown; the rank then drains
  // its group before it stops (CoordinatorLink::Leave).
  void RequestShutdown(bool by_signal = false);
  bool shutdown_requested();
  bool stopped_by_signal();
  // Stops serving (in-flight calls get a short grace period) and finishes the queued work.
  // Idempotent; the destructor calls it.
  void Stop();
  // What the metrics port shows (worker/worker_metrics.h); any thread.
  WorkerMetricsSnapshot MetricsSnapshot();

  grpc::Status Init(grpc::ServerContext*, const v1::InitRequest* request,
                    v1::InitResponse* response) override;
  grpc::Status LoadShard(grpc::ServerContext*, const v1::LoadShardRequest* request,
                         v1::LoadShardResponse* response) override;
  grpc::Status Step(grpc::ServerContext*, const v1::StepRequest* request,
                    v1::StepResponse* response) override;
  grpc::Status Status(grpc::ServerContext*, const v1::WorkerStatusRequest* request,
                      v1::WorkerStatusResponse* response) override;
  grpc::Status Shutdown(grpc::ServerContext*, const v1::ShutdownRequest* request,
                        v1::ShutdownResponse* response) override;
  // worker/adapter_rpcs.cc: on the gRPC thread, beside steps (a follower's execution thread runs
  // its relayed steps): the table is thread-safe, and a step keeps the shards it took.
  grpc::Status LoadAdapter(grpc::ServerContext*, const v1::LoadAdapterRequest* request,
                           v1::LoadAdapterResponse* response) override;
  grpc::Status UnloadAdapter(grpc::ServerContext*, const v1::UnloadAdapterRequest* request,
                             v1::UnloadAdapterResponse* response) override;

 private:
  explicit WorkerServer(const WorkerServerOptions& options);

  // What Init and LoadAdapter may open: the files this worker was started with.
  LoadPolicy Policy() const {
    return {options_.model_path, options_.model_dir, options_.draft_model_path, options_.lora_paths,
            options_.lora_dirs};
  }
  // Runs `fn` on the execution thread; its Status becomes the RPC's.
  grpc::Status Execute(const std::function<absl::Status()>& fn);

  // Marks a coordinator call in flight for the silence check (WaitForShutdownOrSilence).
  class CoordinatorCall {
   public:
    explicit CoordinatorCall(WorkerServer* server);
    ~CoordinatorCall();

   private:
    WorkerServer* const server_;
  };

  // Execution thread only.
  // Whether Init may load `path`: the --model file, or one under --model-dir.
  absl::Status DoInit(const v1::InitRequest& request);
  absl::Status DoLoadShard(v1::LoadShardResponse* response);
  absl::Status DoStep(const v1::StepRequest& request, v1::StepResponse* response);
  // Runs the steps rank 0 relays until the relay fails (Init and Stop abort it) or a step fails
  // otherwise than by rejecting its input.
  void FollowSteps();
  // gRPC thread: waits until the step before `step_id` has run (the coordinator keeps one step
  // per pipeline stage in flight, and their calls may arrive in any order); false when the
  // coordinator gave the call up first, or an Init started a new group meanwhile.
  bool AwaitTurn(grpc::ServerContext& context, uint64_t step_id);
  // Any thread: whether FollowSteps has the execution thread, and taking it back.
  bool following();
  void StopFollowing(absl::string_view why);
  void SetState(WorkerState state, const std::string& error);

  // Constant after Start.
  const WorkerServerOptions options_;
  const std::string hostname_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;

  // Owned by the execution thread. `group_` is the last accepted Init; `runner_` holds a pointer
  // to `comm_`, which is why re-forming a group swaps what `comm_` forwards to. A CUDA runner
  // also holds `device_comm_`: the NcclCommunicator inside `comm_` (such a runner is released
  // before `comm_` is reset), or in a world of one SingleRankDeviceComm(); null for a CPU group.
  bool initialized_ = false;
  v1::InitRequest group_;
  int cuda_device_ = -1;    // the device of a CUDA group, chosen at Init
  std::string model_path_;  // effective path after Init
  // Set at construction (a world of one until Init), so that a gRPC thread may Abort it.
  const std::unique_ptr<SwappableCommunicator> comm_;
  PipelineLinks links_;  // a pipeline stage's links to its neighbours; swapped like `comm_`
  DeviceCommunicator* device_comm_ = nullptr;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<StepRelay> relay_;  // set by Init for a group that relays steps
  v1::LoadShardResponse loaded_;      // answer for the loaded shard
  uint64_t last_step_id_ = 0;

  // The snapshot Status answers from, and the shutdown flag.
  absl::Mutex status_mu_;
  WorkerState state_ ABSL_GUARDED_BY(status_mu_) = WorkerState::kStarting;
  std::string error_ ABSL_GUARDED_BY(status_mu_);
  std::string device_name_ ABSL_GUARDED_BY(status_mu_) = "cpu";
  int64_t weight_bytes_ ABSL_GUARDED_BY(status_mu_) = 0;
  // The shard loader's progress (WorkerStatusResponse.load_done_bytes), written as it goes.
  std::atomic<int64_t> load_done_bytes_{0};
  std::atomic<int64_t> load_total_bytes_{0};
  int64_t kv_cache_blocks_ ABSL_GUARDED_BY(status_mu_) = 0;
  uint64_t status_last_step_id_ ABSL_GUARDED_BY(status_mu_) = 0;
  std::deque<double> step_ms_ ABSL_GUARDED_BY(status_mu_);  // the most recent steps
  StepDurations step_durations_ ABSL_GUARDED_BY(status_mu_);  // every step, for the metrics
  bool shutdown_requested_ ABSL_GUARDED_BY(status_mu_) = false;
  bool stopped_by_signal_ ABSL_GUARDED_BY(status_mu_) = false;
  bool following_ ABSL_GUARDED_BY(status_mu_) = false;       // FollowSteps is queued or running
  bool stop_following_ ABSL_GUARDED_BY(status_mu_) = false;  // StopFollowing ended it
  // The silence check: armed by Init and heartbeats, disarmed by registering; the time of the last call's start
  // or end, and how many are in flight.
  bool coordinator_known_ ABSL_GUARDED_BY(status_mu_) = false;
  // Where LoadAdapter puts adapters: the loaded shard's table, and the shape it cuts them by; set
  // by LoadShard, cleared when Init drops the shard. `lora_slots_`: what the table holds now
  // (slot, path), which a later Init compares with its own list to keep the shard.
  struct LoraTarget {
    std::shared_ptr<LoraTable> table;
    ModelConfig config;
    ShardLayout layout;
    int64_t max_rank = 0;
  };
  std::optional<LoraTarget> lora_target_ ABSL_GUARDED_BY(status_mu_);
  std::vector<std::pair<int32_t, std::string>> lora_slots_ ABSL_GUARDED_BY(status_mu_);
  std::vector<std::pair<int32_t, std::string>> HeldLoras() {
    absl::MutexLock lock(&status_mu_);
    return lora_slots_;
  }
  absl::Time last_call_ ABSL_GUARDED_BY(status_mu_);
  int calls_in_flight_ ABSL_GUARDED_BY(status_mu_) = 0;

  // Last: destroyed first, so queued work finishes while everything above still exists.
  ExecutionThread exec_;
};

}  // namespace tpserve
