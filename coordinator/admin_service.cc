#include "coordinator/admin_service.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"

namespace tpserve {

AdminServiceImpl::AdminServiceImpl(const ClusterServiceImpl* cluster, int world_size,
                                   int pipeline_size, std::string model_path)
    : cluster_(cluster),
      world_size_(world_size),
      pipeline_size_(pipeline_size),
      model_path_(std::move(model_path)) {}

v1::ShardStatus* AdminServiceImpl::AddShard(v1::ClusterStatusResponse* response, int rank) const {
  const int tp_size = world_size_ / pipeline_size_;
  v1::ShardStatus* shard = response->add_shards();
  shard->set_rank(rank);
  shard->set_stage(rank / tp_size);
  shard->set_tp_rank(rank % tp_size);
  return shard;
}

void AdminServiceImpl::SetServing(const WorkerPool* pool, Engine* engine) {
  absl::MutexLock lock(&mutex_);
  pool_ = pool;
  engine_ = engine;
}

absl::StatusOr<Engine*> AdminServiceImpl::GetEngine() {
  absl::MutexLock lock(&mutex_);
  if (engine_ == nullptr) {
    return absl::UnavailableError("cluster is starting: workers are not loaded yet");
  }
  return engine_;
}

grpc::Status AdminServiceImpl::ClusterStatus(grpc::ServerContext* context,
                                             const v1::ClusterStatusRequest* request,
                                             v1::ClusterStatusResponse* response) {
  const WorkerPool* pool;
  const Engine* engine;
  {
    absl::MutexLock lock(&mutex_);
    pool = pool_;
    engine = engine_;
  }
  response->set_world_size(world_size_);
  response->set_pipeline_parallel_size(pipeline_size_);
  response->set_model_path(model_path_);
  if (pool == nullptr || engine == nullptr) {
    const std::vector<RegisteredWorker> registered = cluster_->Registered();
    response->set_state(v1::HealthResponse::STATE_STARTING);
    response->set_message(absl::StrCat("cluster is starting: ", registered.size(), " of ",
                                       world_size_, " ranks registered"));
    for (const RegisteredWorker& w : registered) {
      v1::ShardStatus* shard = AddShard(response, w.rank);
      shard->set_address(w.address);
      shard->set_hostname(w.hostname);
      shard->set_state("registered");
      shard->set_heartbeat_age_ms(-1);
    }
    return grpc::Status::OK;
  }

  const absl::Status health = engine->health();
  response->set_state(health.ok() ? v1::HealthResponse::STATE_SERVING
                                  : v1::HealthResponse::STATE_DEGRADED);
  response->set_message(std::string(health.message()));
  response->set_draining(engine->draining());
  const EngineStats stats = engine->stats();
  const int64_t used = stats.blocks_used();
  response->set_kv_block_size(engine->options().block_size);
  response->set_kv_blocks_total(stats.blocks_total);
  response->set_kv_blocks_used(used);
  response->set_kv_blocks_cached(stats.blocks_cached);
  response->set_num_requests_running(stats.num_running);
  response->set_num_requests_waiting(stats.num_waiting);
  response->set_num_preemptions(stats.counters.num_preemptions);
  response->set_prefix_cache_query_tokens(stats.prefix_cache.query_tokens);
  response->set_prefix_cache_hit_tokens(stats.prefix_cache.hit_tokens);
  response->set_spec_draft_tokens(stats.counters.spec_draft_tokens);
  response->set_spec_accepted_tokens(stats.counters.spec_accepted_tokens);
  response->set_recoveries(stats.recovery.recoveries);
  if (const std::optional<Engine::Pause> pause = engine->pause(); pause.has_value()) {
    response->set_num_requests_held(stats.num_held);
    response->set_waiting_for(pause->waiting_for);
    response->set_recovery_grace_left_ms(absl::ToInt64Milliseconds(pause->grace_left));
  }

  const absl::Time now = absl::Now();
  for (const RankReport& report : pool->Reports()) {
    v1::ShardStatus* shard = AddShard(response, report.info.rank);
    shard->set_address(report.info.address);
    shard->set_hostname(report.info.hostname);
    shard->set_device(report.device_name);
    shard->set_kv_blocks_used(used);
    shard->set_last_error(report.last_error);
    shard->set_state(report.loaded.has_value() ? "loaded" : "registered");
    if (report.loaded.has_value()) {
      shard->set_weight_bytes(report.loaded->weight_bytes());
      shard->set_kv_blocks_total(report.loaded->kv_cache_blocks());
    }
    shard->set_heartbeat_age_ms(-1);
    if (report.status.has_value()) {
      const v1::WorkerStatusResponse& status = *report.status;
      if (!status.hostname().empty()) shard->set_hostname(status.hostname());
      if (!status.device_name().empty()) shard->set_device(status.device_name());
      shard->set_state(status.state());
      shard->set_step_latency_p50_ms(status.step_latency_p50_ms());
      if (status.kv_cache_blocks() > 0) shard->set_kv_blocks_total(status.kv_cache_blocks());
      shard->set_heartbeat_age_ms(absl::ToInt64Milliseconds(now - report.status_time));
    }
  }
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::Drain(grpc::ServerContext* context, const v1::DrainRequest* request,
                                     v1::DrainResponse* response) {
  if (grpc::Status s = CheckAdminKey(*context, "AdminService.Drain"); !s.ok()) return s;
  const absl::StatusOr<Engine*> engine = GetEngine();
  if (!engine.ok()) return ToGrpc(engine.status());
  response->set_requests_in_flight((*engine)->Drain());
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::Undrain(grpc::ServerContext* context, const v1::UndrainRequest*,
                                       v1::UndrainResponse*) {
  if (grpc::Status s = CheckAdminKey(*context, "AdminService.Undrain"); !s.ok()) return s;
  const absl::StatusOr<Engine*> engine = GetEngine();
  if (!engine.ok()) return ToGrpc(engine.status());
  (*engine)->Undrain();
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::FlushPrefixCache(grpc::ServerContext* context,
                                                const v1::FlushPrefixCacheRequest* request,
                                                v1::FlushPrefixCacheResponse* response) {
  if (grpc::Status s = CheckAdminKey(*context, "AdminService.FlushPrefixCache"); !s.ok()) {
    return s;
  }
  const absl::StatusOr<Engine*> engine = GetEngine();
  if (!engine.ok()) return ToGrpc(engine.status());
  const absl::StatusOr<int32_t> evicted = (*engine)->FlushPrefixCache();
  if (!evicted.ok()) return ToGrpc(evicted.status());
  response->set_blocks_evicted(*evicted);
  return grpc::Status::OK;
}

namespace {

constexpr absl::Duration kLoraRpcTimeout = absl::Seconds(120);

void ToProto(const LoraModule& module, v1::LoraAdapter* out) {
  out->set_name(module.name);
  out->set_path(module.path);
  out->set_slot(module.slot);
}

}  // namespace

grpc::Status AdminServiceImpl::LoadLoraAdapter(grpc::ServerContext* context,
                                               const v1::LoadLoraAdapterRequest* request,
                                               v1::LoadLoraAdapterResponse* response) {
  if (grpc::Status s = CheckAdminKey(*context, "AdminService.LoadLoraAdapter"); !s.ok()) return s;
  if (loras_ == nullptr) return ToGrpc(absl::UnavailableError("the cluster is starting"));
  const absl::StatusOr<LoraModule> loaded =
      loras_->Load(request->name(), request->path(), kLoraRpcTimeout);
  if (!loaded.ok()) return ToGrpc(loaded.status());
  ToProto(*loaded, response->mutable_adapter());
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::UnloadLoraAdapter(grpc::ServerContext* context,
                                                 const v1::UnloadLoraAdapterRequest* request,
                                                 v1::UnloadLoraAdapterResponse* response) {
  if (grpc::Status s = CheckAdminKey(*context, "AdminService.UnloadLoraAdapter"); !s.ok()) {
    return s;
  }
  if (loras_ == nullptr) return ToGrpc(absl::UnavailableError("the cluster is starting"));
  const int32_t drain = request->drain_timeout_s() > 0 ? request->drain_timeout_s() : 60;
  return ToGrpc(loras_->Unload(request->name(), absl::Seconds(drain), kLoraRpcTimeout));
}

grpc::Status AdminServiceImpl::ListLoraAdapters(grpc::ServerContext* context,
                                                const v1::ListLoraAdaptersRequest* request,
                                                v1::ListLoraAdaptersResponse* response) {
  if (loras_ == nullptr) return grpc::Status::OK;
  for (const LoraModule& module : loras_->Serving()) ToProto(module, response->add_adapters());
  response->set_max_loras(loras_->max_loras());
  return grpc::Status::OK;
}

}  // namespace tpserve
