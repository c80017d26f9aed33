#include "worker/worker_server.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cluster_token.h"
#include "common/grpc_status.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "model/shard_layout.h"
#include "worker/cuda_backend.h"
#include "worker/group_factory.h"
#include "worker/step_planner.h"

namespace tpserve {
namespace {

constexpr int64_t kDefaultBlockSize = 16;

// The adapters `group` names are those the shard holds now (Init's and those loaded since), in
// the same slots of a table of the same shape: a loaded shard serves them as they are.
bool SameLoras(const v1::InitRequest& group, const v1::InitRequest& previous,
               std::vector<std::pair<int32_t, std::string>> held) {
  if (group.max_loras() != previous.max_loras() ||
      group.max_lora_rank() != previous.max_lora_rank()) {
    return false;
  }
  std::vector<std::pair<int32_t, std::string>> wanted;
  for (const v1::InitRequest::LoraAdapter& lora : group.lora_adapters()) {
    wanted.emplace_back(lora.slot(), lora.path());
  }
  std::sort(wanted.begin(), wanted.end());
  std::sort(held.begin(), held.end());
  return wanted == held;
}
constexpr size_t kLatencyWindow = 128;  // steps the p50 is taken over
constexpr double kSlowStepMs = 1000;    // steps slower than this are logged
// How often a gRPC thread waiting for a step looks whether the coordinator cancelled it.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(20);

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// 64-bit FNV-1a as 16 hex digits.
std::string Fingerprint(absl::Span<const uint8_t> bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (uint8_t b : bytes) hash = (hash ^ b) * 1099511628211ull;
  return absl::StrFormat("%016x", hash);
}

absl::Status LoadError(const std::string& path, const absl::Status& status) {
  return absl::FailedPreconditionError(
      absl::StrCat("cannot load model '", path, "': ", status.message()));
}

}  // namespace

const char* WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kStarting:
      return "starting";
    case WorkerState::kInitialized:
      return "initialized";
    case WorkerState::kLoaded:
      return "loaded";
    case WorkerState::kServing:
      return "serving";
    case WorkerState::kFailed:
      return "failed";
  }
  return "unknown";
}

WorkerServer::WorkerServer(const WorkerServerOptions& options)
    : options_(options),
      hostname_(Hostname()),
      comm_(std::make_unique<SwappableCommunicator>(std::make_unique<SingleRankCommunicator>())) {}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const WorkerServerOptions& options) {
  std::unique_ptr<WorkerServer> worker(new WorkerServer(options));
  const std::string host = options.host.find(':') != std::string::npos
                               ? absl::StrCat("[", options.host, "]")
                               : options.host;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(host, ":", options.port), ProcessTls().ServerCredentials(),
                           &port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.RegisterService(worker.get());
  worker->server_ = builder.BuildAndStart();
  if (worker->server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve WorkerService on ", host, ":", options.port));
  }
  worker->address_ = absl::StrCat(host, ":", port);
  return worker;
}

WorkerServer::~WorkerServer() { Stop(); }

void WorkerServer::Stop() {
  StopFollowing("the worker is stopping");
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  server_.reset();
}

void WorkerServer::WaitForShutdownRequest(absl::Duration timeout) {
  absl::MutexLock lock(&status_mu_);
  status_mu_.AwaitWithTimeout(absl::Condition(&shutdown_requested_), timeout);
}

void WorkerServer::ForgetCoordinator() {
  absl::MutexLock lock(&status_mu_);
  coordinator_known_ = false;
}

WorkerServer::Wake WorkerServer::WaitForShutdownOrSilence(absl::Duration silence,
                                                          absl::Duration timeout) {
  absl::MutexLock lock(&status_mu_);
  status_mu_.AwaitWithTimeout(absl::Condition(&shutdown_requested_), timeout);
  if (shutdown_requested_) return Wake::kShutdown;
  if (coordinator_known_ && calls_in_flight_ == 0 && absl::Now() - last_call_ > silence) {
    return Wake::kSilence;
  }
  return Wake::kTimeout;
}

WorkerServer::CoordinatorCall::CoordinatorCall(WorkerServer* server) : server_(server) {
  absl::MutexLock lock(&server_->status_mu_);
  ++server_->calls_in_flight_;
  server_->last_call_ = absl::Now();
}

WorkerServer::CoordinatorCall::~CoordinatorCall() {
  absl::MutexLock lock(&server_->status_mu_);
  --server_->calls_in_flight_;
  server_->last_call_ = absl::Now();
}

void WorkerServer::RequestShutdown(bool by_signal) {
  absl::MutexLock lock(&status_mu_);
  shutdown_requested_ = true;
  stopped_by_signal_ = stopped_by_signal_ || by_signal;
}

bool WorkerServer::stopped_by_signal() {
  absl::MutexLock lock(&status_mu_);
  return stopped_by_signal_;
}

bool WorkerServer::shutdown_requested() {
  absl::MutexLock lock(&status_mu_);
  return shutdown_requested_;
}

void WorkerServer::SetState(WorkerState state, const std::string& error) {
  absl::MutexLock lock(&status_mu_);
  state_ = state;
  error_ = error;
}

grpc::Status WorkerServer::Execute(const std::function<absl::Status()>& fn) {
  absl::Status status;
  exec_.Run([&] { status = fn(); });
  return ToGrpc(status);
}

// ---- RPCs ------------------------------------------------------------------------------------

grpc::Status WorkerServer::Init(grpc::ServerContext* context, const v1::InitRequest* request,
                                v1::InitResponse* response) {
  if (grpc::Status s = CheckClusterToken(*context, "WorkerService.Init"); !s.ok()) return s;
  const CoordinatorCall call(this);
  response->set_hostname(hostname_);
  StopFollowing("Init re-forms the group");
  const grpc::Status status = Execute([&] { return DoInit(*request); });
  absl::MutexLock lock(&status_mu_);
  coordinator_known_ = true;
  response->set_device_name(device_name_);
  return status;
}

grpc::Status WorkerServer::LoadShard(grpc::ServerContext* context, const v1::LoadShardRequest*,
                                     v1::LoadShardResponse* response) {
  if (grpc::Status s = CheckClusterToken(*context, "WorkerService.LoadShard"); !s.ok()) return s;
  const CoordinatorCall call(this);
  // Whether steps are relayed belongs to the group Init formed, not to the shard `loaded_` holds.
  const grpc::Status status = Execute([&] {
    const absl::Status loaded = DoLoadShard(response);
    response->set_relays_steps(relay_ != nullptr);
    return loaded;
  });
  if (status.ok() && response->relays_steps() && options_.rank != 0) {
    absl::MutexLock lock(&status_mu_);
    if (!following_) {
      following_ = true;
      exec_.Post([this] { FollowSteps(); });
    }
  }
  return status;
}

grpc::Status WorkerServer::Step(grpc::ServerContext* context, const v1::StepRequest* request,
                                v1::StepResponse* response) {
  if (grpc::Status s = CheckClusterToken(*context, "WorkerService.Step"); !s.ok()) return s;
  if (following()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this rank takes its steps from rank 0 (relay_steps), not over gRPC");
  }
  const CoordinatorCall call(this);
  if (!AwaitTurn(*context, request->step_id())) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        absl::StrCat("step ", request->step_id(),
                                     " was given up (or its group re-formed) while it waited for "
                                     "the step before it"));
  }
  absl::Status status;
  bool abandoned = false;
  exec_.Run([&] { status = DoStep(*request, response); }, kCancelPoll,
            [&] {
              if (abandoned || !context->IsCancelled()) return;
              // The coordinator gave the step up (a rank missed its heartbeat or failed, or the
              // deadline passed): the peers this rank waits for in a collective may never come, and
              // the group re-forms only once this rank's execution thread is free for Init.
              abandoned = true;
              LogWarning("worker",
                         "rank %d: the coordinator abandoned step %llu: leaving its collectives",
                         options_.rank, static_cast<unsigned long long>(request->step_id()));
              const std::string why =
                  absl::StrCat("the coordinator abandoned step ", request->step_id());
              comm_->Abort(why);
              links_.Abort(why);
            });
  return ToGrpc(status);
}

grpc::Status WorkerServer::Status(grpc::ServerContext* context, const v1::WorkerStatusRequest*,
                                  v1::WorkerStatusResponse* response) {
  if (grpc::Status s = CheckClusterToken(*context, "WorkerService.Status"); !s.ok()) return s;
  absl::MutexLock lock(&status_mu_);
  last_call_ = absl::Now();  // the coordinator's heartbeat
  coordinator_known_ = true;
  response->set_rank(options_.rank);
  response->set_state(WorkerStateName(state_));
  response->set_hostname(hostname_);
  response->set_device_name(device_name_);
  response->set_weight_bytes(weight_bytes_);
  response->set_kv_cache_blocks(kv_cache_blocks_);
  response->set_last_step_id(status_last_step_id_);
  if (!step_ms_.empty()) {
    std::vector<double> sorted(step_ms_.begin(), step_ms_.end());
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    response->set_step_latency_p50_ms(sorted[sorted.size() / 2]);
  }
  response->set_error(error_);
  response->set_load_done_bytes(load_done_bytes_);
  response->set_load_total_bytes(load_total_bytes_);
  return grpc::Status::OK;
}

grpc::Status WorkerServer::Shutdown(grpc::ServerContext* context, const v1::ShutdownRequest*,
                                    v1::ShutdownResponse*) {
  if (grpc::Status s = CheckClusterToken(*context, "WorkerService.Shutdown"); !s.ok()) return s;
  LogInfo("worker", "rank %d: Shutdown requested", options_.rank);
  RequestShutdown();  // The main thread stops the server once this reply is on its way.
  return grpc::Status::OK;
}

// ---- Execution thread ------------------------------------------------------------------------

absl::Status WorkerServer::DoInit(const v1::InitRequest& request) {
  const int rank = request.rank(), world = request.world_size();
  if (rank != options_.rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("Init names rank ", rank, " but this worker is rank ", options_.rank));
  }
  if (world < 1 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("Init: rank ", rank, " is not in a world of ", world));
  }
  if (request.self_spec_layers() < 0 ||
      (request.self_spec_layers() > 0 && !request.draft_model_path().empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Init: self_spec_layers (", request.self_spec_layers(),
                     ") must not be negative, and not positive together with a draft_model_path"));
  }
  if (request.block_size() < 0 || request.kv_cache_blocks() < 0 || request.kv_cache_bytes() < 0 ||
      request.max_num_seqs() < 0 || request.max_num_batched_tokens() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Init: block_size (", request.block_size(), "), kv_cache_blocks (",
                     request.kv_cache_blocks(), "), kv_cache_bytes (", request.kv_cache_bytes(),
                     "), max_num_seqs (", request.max_num_seqs(), ") and max_num_batched_tokens (",
                     request.max_num_batched_tokens(), ") must not be negative"));
  }
  const bool cuda = request.device() == v1::DEVICE_CUDA;
  std::string device_name = "cpu";
  int cuda_device = -1;
  if (cuda) {
    auto choice = SelectCudaDevice(options_.cuda_device, rank);
    if (!choice.ok()) {
      SetState(WorkerState::kFailed, std::string(choice.status().message()));
      return choice.status();
    }
    cuda_device = choice->ordinal;
    device_name = choice->name;
  }
  GroupSpec spec;
  spec.rank = rank;
  spec.world = world;
  spec.cuda_device = cuda_device;
  spec.group_id = request.group_id();
  spec.coordinator_address = request.coordinator_address();
  spec.relay_steps = request.relay_steps();
  spec.pipeline_stages = std::max(1, request.pipeline_size());
  spec.cpu_transport = options_.cpu_transport;
  spec.host = options_.host;
  absl::StatusOr<FormedGroup> formed = FormGroup(spec);
  if (!formed.ok()) {
    // A malformed Init changes nothing; a group that did not form leaves the rank failed.
    if (!absl::IsInvalidArgument(formed.status())) {
      SetState(WorkerState::kFailed, std::string(formed.status().message()));
    }
    return formed.status();
  }
  relay_.reset();  // it points into the communicator replaced below
  v1::InitRequest group = request;
  if (group.block_size() == 0) group.set_block_size(kDefaultBlockSize);
  // A refused path is not opened, and not echoed back beyond what the caller sent.
  RETURN_IF_ERROR(Policy().Check(request));
  const std::string model_path =
      request.model_path().empty() ? options_.model_path : request.model_path();
  // A CUDA model of several ranks is reloaded: its decode graphs captured NCCL calls on the old
  // communicator, and NCCL does not destroy a communicator while a graph still references it.
  const bool keep_shard =
      runner_ != nullptr && group.world_size() == group_.world_size() &&
      group.pipeline_size() == group_.pipeline_size() && model_path == model_path_ &&
      group.block_size() == group_.block_size() &&
      group.kv_cache_blocks() == group_.kv_cache_blocks() &&
      group.kv_cache_bytes() == group_.kv_cache_bytes() && group.device() == group_.device() &&
      (!cuda || world == 1) && group.max_num_seqs() == group_.max_num_seqs() &&
      group.max_num_batched_tokens() == group_.max_num_batched_tokens() &&
      group.enforce_eager() == group_.enforce_eager() &&
      group.draft_model_path() == group_.draft_model_path() &&
      group.self_spec_layers() == group_.self_spec_layers() &&
      group.kv_cache_fp8() == group_.kv_cache_fp8() &&
      group.weights_fp8() == group_.weights_fp8() && SameLoras(group, group_, HeldLoras());
  // Before the communicators it points to change. A kept CUDA shard is a world of one, whose
  // device communicator lives for the whole process.
  if (!keep_shard) {
    runner_.reset();
    absl::MutexLock lock(&status_mu_);
    lora_target_.reset();
    lora_slots_.clear();
  }
  comm_->Reset(std::move(formed->comm));
  links_.Reset(std::move(formed->from_previous), std::move(formed->to_next),
               formed->device_from_previous, formed->device_to_next);
  if (formed->relay_shm != nullptr) relay_ = std::make_unique<StepRelay>(formed->relay_shm);
  device_comm_ = formed->device_comm;
  initialized_ = true;
  group_ = std::move(group);
  cuda_device_ = cuda_device;
  model_path_ = model_path;
  if (runner_ != nullptr) runner_->DropSequences();
  last_step_id_ = 0;
  {
    absl::MutexLock lock(&status_mu_);
    state_ = keep_shard ? WorkerState::kLoaded : WorkerState::kInitialized;
    error_.clear();
    status_last_step_id_ = 0;
    if (!keep_shard) weight_bytes_ = kv_cache_blocks_ = 0;
    device_name_ = device_name;
  }
  LogInfo("worker", "rank %d/%d: init (group '%s', %s, %s)", rank, world, group_.group_id(),
          device_name, keep_shard ? "keeping the loaded shard" : "shard not loaded");
  return absl::OkStatus();
}

absl::Status WorkerServer::DoLoadShard(v1::LoadShardResponse* response) {
  if (!initialized_) return absl::FailedPreconditionError("LoadShard before Init");
  if (runner_ != nullptr) {  // Already loaded for this group: the same answer.
    *response = loaded_;
    return absl::OkStatus();
  }
  ModelRunnerOptions options;
  options.model_path = model_path_;
  options.block_size = group_.block_size();
  options.kv_cache_blocks = group_.kv_cache_blocks();
  options.kv_cache_bytes = group_.kv_cache_bytes();
  options.kv_cache_fp8 = group_.kv_cache_fp8();
  options.weights_fp8 = group_.weights_fp8();
  options.cpu_weights = options_.cpu_weights;
  options.pipeline_stages = std::max(1, group_.pipeline_size());
  options.pipeline_stage = group_.rank() / (group_.world_size() / options.pipeline_stages);
  options.links = &links_;
  options.load_progress = [this](int64_t done, int64_t total) {
    load_total_bytes_ = total;
    load_done_bytes_ = done;
  };
  options.draft_model_path = group_.draft_model_path();
  for (const v1::InitRequest::LoraAdapter& lora : group_.lora_adapters()) {
    options.loras.push_back({lora.slot(), lora.path()});
  }
  options.max_loras = group_.max_loras();
  if (group_.max_lora_rank() > 0) options.max_lora_rank = group_.max_lora_rank();
  if (group_.self_spec_layers() > 0) {  // The target itself, which Init allowed.
    options.draft_model_path = model_path_;
    options.draft_num_layers = group_.self_spec_layers();
  }
  if (group_.device() == v1::DEVICE_CUDA) {
    options.device = Device::kCuda;
    options.cuda.device = cuda_device_;
    options.cuda.gpu_memory_utilization = options_.gpu_memory_utilization;
    options.cuda.enforce_eager = group_.enforce_eager();
    if (group_.max_num_seqs() > 0) options.cuda.max_num_seqs = group_.max_num_seqs();
    if (group_.max_num_batched_tokens() > 0) {
      options.cuda.max_num_batched_tokens = group_.max_num_batched_tokens();
    }
  } else if (options.kv_cache_blocks == 0 && options.kv_cache_bytes == 0) {
    options.kv_cache_bytes = options_.default_kv_cache_bytes;
    options.kv_cache_holds_context = true;
  }
  auto runner = ModelRunner::Create(options, comm_.get(), device_comm_);
  if (!runner.ok()) return LoadError(model_path_, runner.status());
  runner_ = *std::move(runner);
  loaded_.Clear();
  LoadedShard& model = runner_->shard();
  loaded_.set_weight_bytes(model.forward_pass().weight_bytes());
  loaded_.set_kv_cache_blocks(model.kv_shape().num_blocks);
  loaded_.set_model_file_size(model.file().file_size());
  loaded_.set_model_fingerprint(Fingerprint(model.file().header_bytes()));
  loaded_.set_vocab_size(model.config().vocab_size);
  loaded_.set_context_length(model.config().context_length);
  *response = loaded_;
  {
    absl::MutexLock lock(&status_mu_);
    state_ = WorkerState::kLoaded;
    error_.clear();
    weight_bytes_ = loaded_.weight_bytes();
    kv_cache_blocks_ = loaded_.kv_cache_blocks();
    lora_target_ =
        LoraTarget{model.shared_loras(), model.config(), model.layout(), options.max_lora_rank};
    lora_slots_.clear();
    for (const ModelRunnerOptions::Lora& lora : options.loras) {
      lora_slots_.emplace_back(lora.slot, lora.path);
    }
  }
  LogInfo("worker", "rank %d/%d: loaded %s (weights %.1f MiB, %lld KV blocks, fingerprint %s)",
          comm_->rank(), comm_->world_size(), model_path_, loaded_.weight_bytes() / 1048576.0,
          static_cast<long long>(loaded_.kv_cache_blocks()), loaded_.model_fingerprint());
  return absl::OkStatus();
}

absl::Status WorkerServer::DoStep(const v1::StepRequest& request, v1::StepResponse* response) {
  if (runner_ == nullptr) {
    return absl::FailedPreconditionError("Step before LoadShard (call Init, then LoadShard)");
  }
  if (request.step_id() != last_step_id_ + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("step_id ", request.step_id(), " out of order: the last step was ",
                     last_step_id_, ", so the next must be ", last_step_id_ + 1));
  }
  last_step_id_ = request.step_id();  // Consumed even when the step is rejected below.
  const auto start = std::chrono::steady_clock::now();
  const absl::Status relayed =
      relay_ != nullptr && comm_->rank() == 0 ? relay_->Send(request) : absl::OkStatus();
  absl::StatusOr<v1::StepResponse> result =
      relayed.ok() ? runner_->Step(request) : absl::StatusOr<v1::StepResponse>(relayed);
  absl::Status status = result.status();
  if (result.ok()) {
    *response = *std::move(result);
  } else if (const std::optional<uint64_t> refused = RefusedSequenceId(status)) {
    // One sequence's data: the coordinator fails it alone, the group is as it was.
    response->mutable_refused()->set_seq_id(*refused);
    response->mutable_refused()->set_message(std::string(status.message()));
    LogWarning("worker", "rank %d: step %llu refused: %s", comm_->rank(),
               static_cast<unsigned long long>(request.step_id()), std::string(status.message()));
    status = absl::OkStatus();
  } else if (status.code() != absl::StatusCode::kInvalidArgument) {
    SetState(WorkerState::kFailed, std::string(status.message()));  // The group is broken: re-Init.
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  response->set_step_id(request.step_id());
  response->set_compute_ms(ms);
  {
    absl::MutexLock lock(&status_mu_);
    status_last_step_id_ = request.step_id();
    step_ms_.push_back(ms);
    if (step_ms_.size() > kLatencyWindow) step_ms_.pop_front();
    step_durations_.Observe(ms / 1000);
    if (status.ok() && state_ == WorkerState::kLoaded) state_ = WorkerState::kServing;
  }
  if (!status.ok()) {
    LogWarning("worker", "rank %d: step %llu failed: %s", comm_->rank(),
               static_cast<unsigned long long>(request.step_id()), std::string(status.message()));
  } else if (ms > kSlowStepMs) {
    LogWarning("worker", "rank %d: step %llu took %.0f ms (%d sequences)", comm_->rank(),
               static_cast<unsigned long long>(request.step_id()), ms, request.sequences_size());
  }
  return status;
}

WorkerMetricsSnapshot WorkerServer::MetricsSnapshot() {
  WorkerMetricsSnapshot snapshot;
  snapshot.rank = options_.rank;
  snapshot.collectives = comm_->collectives();
  snapshot.collective_seconds = comm_->collective_seconds();
  absl::MutexLock lock(&status_mu_);
  snapshot.state = WorkerStateName(state_);
  snapshot.kv_cache_blocks = kv_cache_blocks_;
  snapshot.weight_bytes = weight_bytes_;
  snapshot.steps = step_durations_;
  return snapshot;
}

bool WorkerServer::AwaitTurn(grpc::ServerContext& context, uint64_t step_id) {
  absl::MutexLock lock(&status_mu_);
  // An Init meanwhile restarts the step ids: this step belonged to the group before it.
  const uint64_t seen = status_last_step_id_;
  auto turn = [this, step_id, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(status_mu_) {
    return status_last_step_id_ + 1 >= step_id || status_last_step_id_ < seen;
  };
  while (!status_mu_.AwaitWithTimeout(absl::Condition(&turn), kCancelPoll)) {
    if (context.IsCancelled()) return false;
  }
  return status_last_step_id_ >= seen;
}

void WorkerServer::FollowSteps() {
  LogInfo("worker", "rank %d: taking the steps from rank 0", options_.rank);
  for (;;) {
    absl::StatusOr<v1::StepRequest> request = relay_->Receive();
    if (!request.ok()) {
      absl::MutexLock lock(&status_mu_);
      if (stop_following_) {  // Init or Stop took the thread back: nothing failed
        LogInfo("worker", "rank %d: stopped taking the steps from rank 0", options_.rank);
      } else {
        state_ = WorkerState::kFailed;
        error_ = std::string(request.status().message());
        LogWarning("worker", "rank %d: no longer taking the steps from rank 0: %s", options_.rank,
                   request.status().message());
      }
      break;
    }
    v1::StepResponse response;
    const absl::Status status = DoStep(*request, &response);
    // A rejected step is rejected alike on every rank (rank 0 tells the coordinator); any other
    // failure broke the group, and DoStep logged it.
    if (!status.ok() && status.code() != absl::StatusCode::kInvalidArgument) {
      SetState(WorkerState::kFailed, std::string(status.message()));
      break;
    }
  }
  absl::MutexLock lock(&status_mu_);
  following_ = false;
  stop_following_ = false;
}

bool WorkerServer::following() {
  absl::MutexLock lock(&status_mu_);
  return following_;
}

void WorkerServer::StopFollowing(absl::string_view why) {
  {
    absl::MutexLock lock(&status_mu_);
    if (!following_) return;
    stop_following_ = true;
  }
  comm_->Abort(why);
}

}  // namespace tpserve
