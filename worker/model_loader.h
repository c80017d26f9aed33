// The loader: what one rank loads to run steps — the mapped model file, its config, and the
// StepModel (this rank's weight shard, the paged KV pool and the forward pass over them) on the
// CPU or on a CUDA device. ModelRunner runs steps on it; tools and tests use it directly.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "worker/comm/communicator.h"
#include "worker/model_runner_options.h"
#include "worker/step_model.h"

namespace tpserve {

class DeviceCommunicator;  // worker/comm/device_communicator.h, in CUDA builds only

class RankModel {
 public:
  const GgufFile& file() const { return *file_; }
  const ModelConfig& config() const { return config_; }
  StepModel& model() { return *model_; }
  const KvCacheShape& kv_shape() const { return model_->kv_shape(); }

 private:
  friend absl::StatusOr<std::unique_ptr<RankModel>> LoadRankModel(
      const ModelRunnerOptions& options, Communicator* comm, DeviceCommunicator* device_comm);
  RankModel() = default;

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  std::unique_ptr<StepModel> model_;
};

// Opens and validates the model, loads this rank's shard (rank and world size come from `comm`,
// which must outlive the model) and allocates the KV pool. The CPU model runs its collectives
// through `comm`. Device::kCuda needs `device_comm`, the same ranks' device collectives
// (NcclCommunicator, or SingleRankDeviceComm() for a world of one), which must outlive the model;
// the CPU ignores it. INVALID_ARGUMENT for sizes that make no pool or a CUDA model without
// `device_comm`; UNIMPLEMENTED for Device::kCuda in a build without CUDA.
absl::StatusOr<std::unique_ptr<RankModel>> LoadRankModel(const ModelRunnerOptions& options,
                                                         Communicator* comm,
                                                         DeviceCommunicator* device_comm = nullptr);

}  // namespace tpserve
