// One rank's loaded shard: the mapped model file, its config, and the ForwardPass over this rank's
// weights and paged KV pool, on the CPU or on a CUDA device. ModelRunner runs steps on it; tools
// and tests use it directly.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "model/shard_layout.h"
#include "worker/comm/communicator.h"
#include "worker/forward_pass.h"
#include "worker/lora_shard.h"
#include "worker/model_runner_options.h"

namespace tpserve {

class DeviceCommunicator;  // worker/comm/device_communicator.h, in CUDA builds only

class LoadedShard {
 public:
  const GgufFile& file() const { return *file_; }
  const ModelConfig& config() const { return config_; }
  const ShardLayout& layout() const { return layout_; }
  ForwardPass& forward_pass() { return *forward_pass_; }
  // The LoRA adapters this rank serves (empty slots when there are none), shared with whoever
  // loads adapters at run time.
  LoraTable& loras() { return *loras_; }
  const LoraTable& loras() const { return *loras_; }
  std::shared_ptr<LoraTable> shared_loras() const { return loras_; }
  const KvCacheShape& kv_shape() const { return forward_pass_->kv_shape(); }

 private:
  friend absl::StatusOr<std::unique_ptr<LoadedShard>> LoadShard(const ModelRunnerOptions& options,
                                                                Communicator* comm,
                                                                DeviceCommunicator* device_comm);
  LoadedShard() = default;

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  ShardLayout layout_;
  std::unique_ptr<ForwardPass> forward_pass_;
  std::shared_ptr<LoraTable> loras_;
};

// This rank's shard (cut by `layout`) of the PEFT adapter in `dir` for a model of `config`
// (model/lora_adapter.h).
absl::StatusOr<std::shared_ptr<const LoraShard>> LoadLoraShard(const ModelConfig& config,
                                                               const ShardLayout& layout,
                                                               const std::string& dir,
                                                               int64_t max_rank);

// Opens and validates the model, loads this rank's shard (rank and world size come from `comm`,
// which must outlive the model) and allocates the KV pool. The CPU model runs its collectives
// through `comm`. Device::kCuda needs `device_comm`, the same ranks' device collectives
// (NcclCommunicator, or SingleRankDeviceComm() for a world of one), which must outlive the model;
// the CPU ignores it. INVALID_ARGUMENT for sizes that make no pool or a CUDA model without
// `device_comm`; UNIMPLEMENTED for Device::kCuda in a build without CUDA.
absl::StatusOr<std::unique_ptr<LoadedShard>> LoadShard(const ModelRunnerOptions& options,
                                                       Communicator* comm,
                                                       DeviceCommunicator* device_comm = nullptr);

}  // namespace tpserve
