// AdminService (admin.proto) for operators and `tpctl`: the cluster's state and every rank's
// shard, KV usage and last heartbeat; draining and flushing the prefix cache. Served on the
// coordinator's admin port (--admin-port), apart from the client and cluster APIs.
//
// Thread-safe: gRPC's sync server runs each call on its own thread; the pool and the engine are
// used only through their thread-safe methods.
#pragma once

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/bearer_keys.h"
#include "coordinator/cluster_service.h"
#include "coordinator/engine.h"
#include "coordinator/lora_manager.h"
#include "coordinator/worker_pool.h"
#include "tpserve/v1/admin.grpc.pb.h"

namespace tpserve {

class AdminServiceImpl final : public v1::AdminService::Service {
 public:
  // `cluster` must outlive the service; until SetServing, ClusterStatus reports STATE_STARTING
  // with the ranks registered so far, and Drain and FlushPrefixCache fail with UNAVAILABLE.
  AdminServiceImpl(const ClusterServiceImpl* cluster, int world_size, int pipeline_size,
                   std::string model_path);

  // `pool` and `engine` must outlive the server.
  void SetServing(const WorkerPool* pool, Engine* engine);
  // The LoRA adapters LoadLoraAdapter and UnloadLoraAdapter change; must outlive the service.
  void SetLoras(LoraManager* loras) { loras_ = loras; }
  // From now on Drain, Undrain and FlushPrefixCache need one of `keys` (null or empty: open).
  // `keys` must outlive the service.
  void SetAdminKeys(const BearerKeys* keys) { admin_keys_ = keys; }

  grpc::Status ClusterStatus(grpc::ServerContext* context, const v1::ClusterStatusRequest* request,
                             v1::ClusterStatusResponse* response) override;
  grpc::Status Drain(grpc::ServerContext* context, const v1::DrainRequest* request,
                     v1::DrainResponse* response) override;
  grpc::Status Undrain(grpc::ServerContext* context, const v1::UndrainRequest* request,
                       v1::UndrainResponse* response) override;
  grpc::Status FlushPrefixCache(grpc::ServerContext* context,
                                const v1::FlushPrefixCacheRequest* request,
                                v1::FlushPrefixCacheResponse* response) override;
  grpc::Status LoadLoraAdapter(grpc::ServerContext* context,
                               const v1::LoadLoraAdapterRequest* request,
                               v1::LoadLoraAdapterResponse* response) override;
  grpc::Status UnloadLoraAdapter(grpc::ServerContext* context,
                                 const v1::UnloadLoraAdapterRequest* request,
                                 v1::UnloadLoraAdapterResponse* response) override;
  grpc::Status ListLoraAdapters(grpc::ServerContext* context,
                                const v1::ListLoraAdaptersRequest* request,
                                v1::ListLoraAdaptersResponse* response) override;

 private:
  // Constant after construction.
  const ClusterServiceImpl* const cluster_;
  const int world_size_;
  const int pipeline_size_;
  const std::string model_path_;
  const BearerKeys* admin_keys_ = nullptr;  // set before the server starts
  LoraManager* loras_ = nullptr;            // set before the server starts

  grpc::Status CheckAdminKey(const grpc::ServerContext& context, const char* method) const {
    return admin_keys_ == nullptr ? grpc::Status::OK : admin_keys_->Check(context, method, kSurfaceAdmin);
  }
  // The engine once serving; UNAVAILABLE "cluster is starting" before.
  absl::StatusOr<Engine*> GetEngine();
  // A new shard row for `rank`, with its stage and tensor-parallel rank.
  v1::ShardStatus* AddShard(v1::ClusterStatusResponse* response, int rank) const;

  absl::Mutex mutex_;
  const WorkerPool* pool_ ABSL_GUARDED_BY(mutex_) = nullptr;
  Engine* engine_ ABSL_GUARDED_BY(mutex_) = nullptr;
};

}  // namespace tpserve
