#include "coordinator/worker_pool.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/check.h"
#include "common/cluster_token.h"
#include "common/logging.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "workers";

// After the first failed call, how long CallAll waits for the other ranks before cancelling.
constexpr absl::Duration kFailureGrace = absl::Seconds(1);
// After a failed step, how long each rank has to answer Status (to tell dead ranks from peers).
constexpr absl::Duration kProbeTimeout = absl::Seconds(1);
// How often LoadShard asks the ranks how far they are.
constexpr absl::Duration kLoadPollInterval = absl::Milliseconds(250);

absl::StatusCode ToAbsl(grpc::StatusCode code) { return static_cast<absl::StatusCode>(code); }

std::shared_ptr<v1::WorkerService::Stub> Connect(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  return v1::WorkerService::NewStub(ClusterChannel(address, args));
}

}  // namespace

WorkerPool::WorkerPool(std::vector<RegisteredWorker> workers)
    : world_size_(static_cast<int>(workers.size())) {
  for (int rank = 0; rank < world_size_; ++rank) {
    TP_CHECK(workers[rank].rank == rank);
    reports_.emplace_back().info = workers[rank];
    ranks_.push_back({workers[rank], Connect(workers[rank].address)});
  }
}

void WorkerPool::UpdateWorkers(const std::vector<RegisteredWorker>& workers) {
  TP_CHECK(static_cast<int>(workers.size()) == world_size_);
  {
    absl::MutexLock lock(&ranks_mutex_);
    for (int rank = 0; rank < world_size_; ++rank) {
      TP_CHECK(workers[rank].rank == rank);
      Rank& r = ranks_[rank];
      if (r.info.address != workers[rank].address) {
        LogInfo(kLog, "rank %d moved from %s to %s", rank, r.info.address, workers[rank].address);
        r.stub = Connect(workers[rank].address);
      }
      r.info = workers[rank];
    }
  }
  // Not under ranks_mutex_: Heartbeat takes the two the other way round.
  absl::MutexLock lock(&reports_mutex_);
  for (int rank = 0; rank < world_size_; ++rank) reports_[rank].info = workers[rank];
}

std::string WorkerPool::Address(int rank) const {
  absl::MutexLock lock(&ranks_mutex_);
  return ranks_[rank].info.address;
}

std::vector<RankReport> WorkerPool::Reports() const {
  absl::MutexLock lock(&reports_mutex_);
  return reports_;
}

std::vector<grpc::Status> WorkerPool::CallAll(absl::Duration timeout, bool cancel_on_failure,
                                              const StartCall& start, StepCalls* step,
                                              int ranks) const {
  const int n = ranks == kEveryRank ? world_size() : ranks;
  std::vector<grpc::Status> statuses(world_size());
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(n);
  const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
  for (auto& context : contexts) {
    context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(deadline);
  }
  std::vector<std::shared_ptr<v1::WorkerService::Stub>> stubs;  // alive until every call ends
  {
    absl::MutexLock lock(&ranks_mutex_);
    for (const Rank& r : ranks_) stubs.push_back(r.stub);
  }
  if (step != nullptr) {
    absl::MutexLock lock(&step_mutex_);
    if (!abandoned_.ok()) {
      step->abandoned = abandoned_;
      return std::vector<grpc::Status>(
          world_size(), grpc::Status(grpc::StatusCode::CANCELLED, "abandoned before it was sent"));
    }
    for (auto& context : contexts) step->contexts.push_back(context.get());
    steps_.push_back(step);
  }
  absl::Mutex mutex;
  int pending = n;
  std::optional<absl::Time> first_failure;
  for (int rank = 0; rank < n; ++rank) {
    start(rank, stubs[rank]->async(), contexts[rank].get(), [&, rank](grpc::Status s) {
      absl::MutexLock lock(&mutex);
      if (!s.ok() && !first_failure.has_value()) first_failure = absl::Now();
      statuses[rank] = std::move(s);
      --pending;
    });
  }
  auto all_done = [&pending]() { return pending == 0; };
  auto done_or_failed = [&]() { return pending == 0 || first_failure.has_value(); };
  mutex.Lock();
  if (cancel_on_failure) {
    mutex.Await(absl::Condition(&done_or_failed));
  } else {
    mutex.Await(absl::Condition(&all_done));
  }
  if (pending > 0) {
    // Give the other ranks a moment to report: a dead rank's call fails at once, while live
    // ranks stuck in a collective with it would only answer at the deadline. Then cancel them.
    mutex.AwaitWithDeadline(absl::Condition(&all_done), *first_failure + kFailureGrace);
    if (pending > 0) {
      mutex.Unlock();  // cancelling may run a callback, which takes `mutex`, on this thread
      for (auto& context : contexts) context->TryCancel();
      mutex.Lock();
    }
    mutex.Await(absl::Condition(&all_done));
  }
  mutex.Unlock();
  if (step != nullptr) {
    absl::MutexLock lock(&step_mutex_);
    steps_.erase(std::find(steps_.begin(), steps_.end(), step));
    step->contexts.clear();
  }
  return statuses;
}

void WorkerPool::AbandonStep(const absl::Status& cause) const {
  // TryCancel may run a call's callback on this thread; those take only their CallAll's mutex.
  absl::MutexLock lock(&step_mutex_);
  abandoned_ = cause;
  if (steps_.empty()) return;
  LogWarning("pool", "abandoning the %d step(s) in flight: %s", steps_.size(), cause.message());
  for (StepCalls* step : steps_) {
    step->abandoned = cause;
    for (grpc::ClientContext* context : step->contexts) context->TryCancel();
  }
}

std::vector<int> WorkerPool::FailedRanks(const std::vector<grpc::Status>& statuses) const {
  const bool any_real_failure = std::any_of(statuses.begin(), statuses.end(), [](auto& s) {
    return !s.ok() && s.error_code() != grpc::StatusCode::CANCELLED;
  });
  std::vector<int> failed;
  for (int rank = 0; rank < world_size(); ++rank) {
    const grpc::Status& s = statuses[rank];
    if (s.ok() || (any_real_failure && s.error_code() == grpc::StatusCode::CANCELLED)) continue;
    failed.push_back(rank);
  }
  return failed;
}

std::string WorkerPool::DescribeFailure(int rank, const grpc::Status& status,
                                        absl::Duration timeout, const char* separator) const {
  std::string cause = status.error_message();
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    cause = absl::StrCat("no answer within ", absl::FormatDuration(timeout));
  }
  return absl::StrCat("rank ", rank, " (", Address(rank), ")", separator,
                      absl::StatusCodeToString(ToAbsl(status.error_code())), ": ", cause);
}

std::string WorkerPool::DescribeFailures(const std::vector<grpc::Status>& statuses,
                                         absl::Duration timeout) const {
  std::vector<std::string> parts;
  for (int rank : FailedRanks(statuses)) {
    parts.push_back(DescribeFailure(rank, statuses[rank], timeout));
  }
  return absl::StrJoin(parts, "; ");
}

std::string WorkerPool::ExplainStepFailure(const std::vector<grpc::Status>& statuses,
                                           absl::Duration timeout) const {
  const v1::WorkerStatusRequest request;
  std::vector<v1::WorkerStatusResponse> responses(world_size());
  const auto probes = CallAll(kProbeTimeout, /*cancel_on_failure=*/false,
                              [&](int rank, auto* stub, auto* context, auto done) {
                                stub->Status(context, &request, &responses[rank], done);
                              });
  std::vector<std::string> down;
  std::vector<std::string> peers;
  const std::vector<int> failed = FailedRanks(statuses);
  for (int rank = 0; rank < world_size(); ++rank) {
    const bool call_failed = std::find(failed.begin(), failed.end(), rank) != failed.end();
    if (!call_failed && !probes[rank].ok()) {
      down.push_back(DescribeFailure(rank, probes[rank], kProbeTimeout, " is down: "));
    } else if (call_failed && probes[rank].ok()) {
      peers.push_back(DescribeFailure(rank, statuses[rank], timeout));
    } else if (call_failed) {
      down.push_back(DescribeFailure(rank, statuses[rank], timeout, " is down: "));
    }
  }
  if (down.empty()) return absl::StrJoin(peers, "; ");
  std::string message = absl::StrJoin(down, "; ");
  if (!peers.empty()) {
    absl::StrAppend(&message, "; ranks that failed with it: ", absl::StrJoin(peers, "; "));
  }
  return message;
}

absl::Status WorkerPool::Init(const WorkerInitOptions& options, absl::Duration timeout) {
  {
    absl::MutexLock lock(&step_mutex_);
    abandoned_ = absl::OkStatus();  // a new group: its steps start afresh
  }
  std::vector<v1::InitRequest> requests(world_size());
  std::vector<v1::InitResponse> responses(world_size());
  const std::vector<LoraModule> loras =
      options.current_loras ? options.current_loras() : options.loras;
  for (int rank = 0; rank < world_size(); ++rank) {
    v1::InitRequest& r = requests[rank];
    r.set_rank(rank);
    r.set_world_size(world_size());
    r.set_device(options.device);
    r.set_group_id(options.group_id);
    r.set_coordinator_address(options.coordinator_address);
    r.set_model_path(options.model_path);
    r.set_block_size(options.block_size);
    r.set_kv_cache_blocks(options.kv_cache_blocks);
    r.set_kv_cache_bytes(options.kv_cache_bytes);
    r.set_max_num_seqs(options.max_num_seqs);
    r.set_max_num_batched_tokens(options.max_num_batched_tokens);
    r.set_enforce_eager(options.enforce_eager);
    r.set_draft_model_path(options.draft_model_path);
    r.set_self_spec_layers(options.self_spec_layers);
    r.set_kv_cache_fp8(options.kv_cache_fp8);
    r.set_weights_fp8(options.weights_fp8);
    r.set_relay_steps(options.relay_steps);
    r.set_pipeline_size(options.pipeline_size);
    for (const LoraModule& lora : loras) {
      v1::InitRequest::LoraAdapter* adapter = r.add_lora_adapters();
      adapter->set_slot(lora.slot);
      adapter->set_path(lora.path);
    }
    r.set_max_loras(options.max_loras);
    r.set_max_lora_rank(options.max_lora_rank);
  }
  auto statuses = CallAll(timeout, /*cancel_on_failure=*/true,
                          [&](int rank, auto* stub, auto* context, auto done) {
                            stub->Init(context, &requests[rank], &responses[rank], done);
                          });
  for (int rank = 0; rank < world_size(); ++rank) {
    if (!statuses[rank].ok()) {
      return absl::Status(ToAbsl(statuses[rank].error_code()),
                          absl::StrCat("Init failed: ", DescribeFailures(statuses, timeout)));
    }
  }
  output_rank_ = world_size() - world_size() / std::max(1, options.pipeline_size);
  absl::MutexLock lock(&reports_mutex_);
  for (int rank = 0; rank < world_size(); ++rank) {
    LogInfo(kLog, "rank %d initialized: host %s, device %s", rank, responses[rank].hostname(),
            responses[rank].device_name());
    reports_[rank].device_name = responses[rank].device_name();
  }
  return absl::OkStatus();
}

void WorkerPool::PollLoadProgress(LoadProgress* progress) {
  const v1::WorkerStatusRequest request;
  std::vector<v1::WorkerStatusResponse> responses(world_size());
  const auto statuses = CallAll(kProbeTimeout, /*cancel_on_failure=*/false,
                                [&](int rank, auto* stub, auto* context, auto done) {
                                  stub->Status(context, &request, &responses[rank], done);
                                });
  int64_t done = INT64_MAX, total = 0;
  for (int rank = 0; rank < world_size(); ++rank) {
    // A rank that did not answer leaves the figures as they were: a slow answer is no news.
    if (!statuses[rank].ok()) return;
    done = std::min(done, responses[rank].load_done_bytes());
    total = std::max(total, responses[rank].load_total_bytes());
  }
  progress->total_bytes = total;
  progress->done_bytes = total > 0 ? done : 0;
}

absl::StatusOr<LoadedModel> WorkerPool::LoadShard(absl::Duration timeout, LoadProgress* progress) {
  const v1::LoadShardRequest request;
  std::vector<v1::LoadShardResponse> responses(world_size());
  absl::Notification loaded;
  std::thread poller;
  if (progress != nullptr) {
    poller = std::thread([this, progress, &loaded] {
      while (!loaded.WaitForNotificationWithTimeout(kLoadPollInterval)) PollLoadProgress(progress);
      PollLoadProgress(progress);
    });
  }
  auto statuses = CallAll(timeout, /*cancel_on_failure=*/false,
                          [&](int rank, auto* stub, auto* context, auto done) {
                            stub->LoadShard(context, &request, &responses[rank], done);
                          });
  if (poller.joinable()) {
    loaded.Notify();
    poller.join();
  }
  for (int rank = 0; rank < world_size(); ++rank) {
    if (!statuses[rank].ok()) {
      return absl::Status(ToAbsl(statuses[rank].error_code()),
                          absl::StrCat("LoadShard failed: ", DescribeFailures(statuses, timeout)));
    }
  }
  const v1::LoadShardResponse& first = responses[0];
  std::vector<std::string> differing;
  for (int rank = 1; rank < world_size(); ++rank) {
    const v1::LoadShardResponse& r = responses[rank];
    if (r.model_file_size() != first.model_file_size() ||
        r.model_fingerprint() != first.model_fingerprint()) {
      differing.push_back(absl::StrCat("rank ", rank, " (", Address(rank), ") loaded ",
                                       r.model_file_size(), " bytes, fingerprint ",
                                       r.model_fingerprint()));
    }
  }
  if (!differing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("ranks loaded different model files: rank 0 (", Address(0), ") loaded ",
                     first.model_file_size(), " bytes, fingerprint ", first.model_fingerprint(),
                     "; ", absl::StrJoin(differing, "; ")));
  }
  {
    absl::MutexLock lock(&reports_mutex_);
    for (int rank = 0; rank < world_size(); ++rank) reports_[rank].loaded = responses[rank];
  }
  const bool relay = world_size() > 1 && std::all_of(responses.begin(), responses.end(),
                                                     [](auto& r) { return r.relays_steps(); });
  relay_steps_ = relay;
  if (relay) LogInfo(kLog, "steps go to rank 0, which relays them to the other ranks");
  LoadedModel model;
  model.kv_cache_blocks = first.kv_cache_blocks();
  model.vocab_size = first.vocab_size();
  model.context_length = first.context_length();
  model.model_file_size = first.model_file_size();
  model.model_fingerprint = first.model_fingerprint();
  for (int rank = 0; rank < world_size(); ++rank) {
    const v1::LoadShardResponse& r = responses[rank];
    model.kv_cache_blocks = std::min(model.kv_cache_blocks, r.kv_cache_blocks());
    model.weight_bytes += r.weight_bytes();
    LogInfo(kLog, "rank %d loaded its shard: %d weight bytes, %d KV blocks", rank, r.weight_bytes(),
            r.kv_cache_blocks());
  }
  if (model.kv_cache_blocks <= 0) {
    return absl::FailedPreconditionError("a rank reported a KV cache of 0 blocks");
  }
  return model;
}

absl::StatusOr<v1::StepResponse> WorkerPool::Step(const v1::StepRequest& request,
                                                  absl::Duration timeout) {
  std::vector<v1::StepResponse> responses(world_size());
  StepCalls calls;
  auto statuses = CallAll(
      timeout, /*cancel_on_failure=*/true,
      [&](int rank, auto* stub, auto* context, auto done) {
        stub->Step(context, &request, &responses[rank], done);
      },
      &calls, relay_steps_ ? 1 : kEveryRank);
  {
    absl::MutexLock lock(&step_mutex_);
    if (!calls.abandoned.ok()) {
      return absl::UnavailableError(
          absl::StrCat("step ", request.step_id(), " abandoned: ", calls.abandoned.message()));
    }
  }
  if (!FailedRanks(statuses).empty()) {
    return absl::UnavailableError(
        absl::StrCat("step ", request.step_id(), ": ", ExplainStepFailure(statuses, timeout)));
  }
  const int answering = output_rank_;
  if (responses[answering].step_id() != request.step_id()) {
    return absl::UnavailableError(absl::StrCat("step ", request.step_id(), ": rank ", answering,
                                               " (", Address(answering), ") answered step ",
                                               responses[answering].step_id()));
  }
  return std::move(responses[answering]);
}

absl::Status WorkerPool::Heartbeat(absl::Duration timeout, RankCheck check) {
  const v1::WorkerStatusRequest request;
  std::vector<v1::WorkerStatusResponse> responses(world_size());
  auto statuses = CallAll(timeout, /*cancel_on_failure=*/false,
                          [&](int rank, auto* stub, auto* context, auto done) {
                            stub->Status(context, &request, &responses[rank], done);
                          });
  {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&reports_mutex_);
    for (int rank = 0; rank < world_size(); ++rank) {
      RankReport& report = reports_[rank];
      if (statuses[rank].ok()) {
        report.status = responses[rank];
        report.status_time = now;
        if (!responses[rank].error().empty()) report.last_error = responses[rank].error();
      } else {
        report.last_error = DescribeFailure(rank, statuses[rank], timeout);
      }
    }
  }
  std::vector<std::string> problems;
  const std::string failures = DescribeFailures(statuses, timeout);
  if (!failures.empty()) problems.push_back(failures);
  for (int rank = 0; rank < world_size(); ++rank) {
    if (check == RankCheck::kHealthy && statuses[rank].ok() &&
        responses[rank].state() == "failed") {
      problems.push_back(absl::StrCat("rank ", rank, " (", Address(rank),
                                      ") reports failed: ", responses[rank].error()));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("heartbeat: ", absl::StrJoin(problems, "; ")));
}

absl::Status WorkerPool::LoadAdapter(int32_t slot, const std::string& path,
                                     absl::Duration timeout) {
  v1::LoadAdapterRequest request;
  request.set_slot(slot);
  request.set_path(path);
  std::vector<v1::LoadAdapterResponse> responses(world_size());
  auto statuses = CallAll(timeout, /*cancel_on_failure=*/false,
                          [&](int rank, auto* stub, auto* context, auto done) {
                            stub->LoadAdapter(context, &request, &responses[rank], done);
                          });
  const std::string failures = DescribeFailures(statuses, timeout);
  if (failures.empty()) return absl::OkStatus();
  // A rank's own refusal (a bad adapter, a path it may not open) is the caller's error.
  const grpc::StatusCode first = statuses[FailedRanks(statuses).front()].error_code();
  return absl::Status(ToAbsl(first), absl::StrCat("LoadAdapter: ", failures));
}

absl::Status WorkerPool::UnloadAdapter(int32_t slot, absl::Duration timeout) {
  v1::UnloadAdapterRequest request;
  request.set_slot(slot);
  std::vector<v1::UnloadAdapterResponse> responses(world_size());
  auto statuses = CallAll(timeout, /*cancel_on_failure=*/false,
                          [&](int rank, auto* stub, auto* context, auto done) {
                            stub->UnloadAdapter(context, &request, &responses[rank], done);
                          });
  const std::string failures = DescribeFailures(statuses, timeout);
  if (failures.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("UnloadAdapter: ", failures));
}

void WorkerPool::Shutdown(absl::Duration timeout) {
  const v1::ShutdownRequest request;
  std::vector<v1::ShutdownResponse> responses(world_size());
  auto statuses = CallAll(timeout, /*cancel_on_failure=*/false,
                          [&](int rank, auto* stub, auto* context, auto done) {
                            stub->Shutdown(context, &request, &responses[rank], done);
                          });
  const std::string failures = DescribeFailures(statuses, timeout);
  if (failures.empty()) {
    LogInfo(kLog, "all %d ranks acknowledged Shutdown", world_size());
  } else {
    LogWarning(kLog, "Shutdown: %s", failures);
  }
}

}  // namespace tpserve
