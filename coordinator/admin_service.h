// AdminService (admin.proto) for operators and `tpctl`: the cluster's state and every rank's
// shard, KV usage and last heartbeat, served on the coordinator's port.
//
// Thread-safe: gRPC's sync server runs each call on its own thread; the pool and the engine are
// read only through their thread-safe accessors.
#pragma once

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/cluster_service.h"
#include "coordinator/engine.h"
#include "coordinator/worker_pool.h"
#include "tpserve/v1/admin.grpc.pb.h"

namespace tpserve {

class AdminServiceImpl final : public v1::AdminService::Service {
 public:
  // `cluster` must outlive the service; until SetServing, ClusterStatus reports STATE_STARTING
  // with the ranks registered so far.
  AdminServiceImpl(const ClusterServiceImpl* cluster, int world_size, std::string model_path);

  // `pool` and `engine` must outlive the server.
  void SetServing(const WorkerPool* pool, const Engine* engine);

  grpc::Status ClusterStatus(grpc::ServerContext* context, const v1::ClusterStatusRequest* request,
                             v1::ClusterStatusResponse* response) override;

 private:
  // Constant after construction.
  const ClusterServiceImpl* const cluster_;
  const int world_size_;
  const std::string model_path_;

  absl::Mutex mutex_;
  const WorkerPool* pool_ ABSL_GUARDED_BY(mutex_) = nullptr;
  const Engine* engine_ ABSL_GUARDED_BY(mutex_) = nullptr;
};

}  // namespace tpserve
