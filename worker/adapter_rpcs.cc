// WorkerService.LoadAdapter and UnloadAdapter: a LoRA adapter into (or out of) a slot of the
// loaded shard's table, at run time (coordinator/lora_manager.h drives them on every rank).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/cluster_token.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "worker/loaded_shard.h"
#include "worker/worker_server.h"

namespace tpserve {

grpc::Status WorkerServer::LoadAdapter(grpc::ServerContext* context,
                                       const v1::LoadAdapterRequest* request,
                                       v1::LoadAdapterResponse* response) {
  if (grpc::Status s = CheckClusterToken(*context, "WorkerService.LoadAdapter"); !s.ok()) return s;
  const CoordinatorCall call(this);
  std::optional<LoraTarget> target;
  {
    absl::MutexLock lock(&status_mu_);
    target = lora_target_;
  }
  if (!target.has_value()) {
    return ToGrpc(absl::FailedPreconditionError("LoadAdapter before LoadShard"));
  }
  if (request->slot() < 1 || request->slot() > target->table->num_slots()) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("LoadAdapter: slot ", request->slot(), " is outside [1, ",
                     target->table->num_slots(), "] (--max-loras)")));
  }
  // Not opened, and not echoed back beyond what the caller sent.
  if (!Policy().MayLoadLora(request->path())) {
    return ToGrpc(absl::PermissionDeniedError(
        "LoadAdapter: this worker loads LoRA adapters only from its --lora-path folders, under "
        "its --lora-dir or under its --model-dir"));
  }
  absl::StatusOr<std::shared_ptr<const LoraShard>> shard =
      LoadLoraShard(target->config, target->layout, request->path(), target->max_rank);
  if (!shard.ok()) return ToGrpc(shard.status());
  response->set_bytes((*shard)->bytes);
  absl::MutexLock lock(&status_mu_);
  // An Init that replaced the shard meanwhile sent its own adapters: this one was for the old.
  if (!lora_target_.has_value() || lora_target_->table != target->table) {
    return ToGrpc(absl::AbortedError("LoadAdapter: the group re-formed while it loaded"));
  }
  target->table->Set(request->slot(), *std::move(shard));
  std::erase_if(lora_slots_, [&](const auto& held) { return held.first == request->slot(); });
  lora_slots_.emplace_back(request->slot(), request->path());
  LogInfo("worker", "rank %d: LoRA adapter %s in slot %d (%.1f MiB)", options_.rank,
          request->path(), request->slot(), response->bytes() / 1048576.0);
  return grpc::Status::OK;
}

grpc::Status WorkerServer::UnloadAdapter(grpc::ServerContext* context,
                                         const v1::UnloadAdapterRequest* request,
                                         v1::UnloadAdapterResponse*) {
  if (grpc::Status s = CheckClusterToken(*context, "WorkerService.UnloadAdapter"); !s.ok()) {
    return s;
  }
  const CoordinatorCall call(this);
  absl::MutexLock lock(&status_mu_);
  if (!lora_target_.has_value()) {
    return ToGrpc(absl::FailedPreconditionError("UnloadAdapter before LoadShard"));
  }
  lora_target_->table->Set(request->slot(), nullptr);
  std::erase_if(lora_slots_, [&](const auto& held) { return held.first == request->slot(); });
  LogInfo("worker", "rank %d: LoRA slot %d emptied", options_.rank, request->slot());
  return grpc::Status::OK;
}

}  // namespace tpserve
