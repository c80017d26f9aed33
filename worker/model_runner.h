// Everything one rank needs to run steps: the mapped model file, its config, and the StepModel
// (this rank's weight shard, the paged KV pool and the forward pass over them) on the CPU or on a
// CUDA device.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "worker/comm/communicator.h"
#include "worker/step_model.h"

namespace tpserve {

enum class Device { kCpu, kCuda };

// CUDA-only settings (ignored on the CPU).
struct CudaRunnerOptions {
  int device = 0;  // CUDA device ordinal on this host
  // Share of the device's memory tpserve may fill (weights, buffers, KV pool) when the KV pool is
  // sized by neither blocks nor bytes.
  double gpu_memory_utilization = 0.9;
  // The most sequences and tokens one step carries (the scheduler's limits): the static step
  // buffers and the decode CUDA graphs are sized by them.
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  bool enforce_eager = false;  // true: no CUDA graphs
};

struct ModelRunnerOptions {
  std::string model_path;
  Device device = Device::kCpu;
  int64_t block_size = 16;
  // The KV pool: `kv_cache_blocks` blocks when positive; else as many as `kv_cache_bytes` holds
  // when positive; else (CUDA) what cuda.gpu_memory_utilization leaves after everything else.
  int64_t kv_cache_blocks = 0;
  int64_t kv_cache_bytes = 0;
  CudaRunnerOptions cuda;
};

class ModelRunner {
 public:
  // Opens and validates the model, loads this rank's shard (rank and world size come from
  // `comm`, which must outlive the runner) and allocates the KV pool. INVALID_ARGUMENT for sizes
  // that make no pool; UNIMPLEMENTED for Device::kCuda in a build without CUDA.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(const ModelRunnerOptions& options,
                                                             Communicator* comm);

  const GgufFile& file() const { return *file_; }
  const ModelConfig& config() const { return config_; }
  StepModel& model() { return *model_; }
  const KvCacheShape& kv_shape() const { return model_->kv_shape(); }

 private:
  ModelRunner() = default;

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  std::unique_ptr<StepModel> model_;
};

}  // namespace tpserve
