// Everything one rank needs to run steps: the mapped model file, its config, this rank's weight
// shard, the paged KV pool and the forward pass over them.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "worker/comm/communicator.h"
#include "worker/kv_cache.h"
#include "worker/llama_model.h"

namespace tpserve {

struct ModelRunnerOptions {
  std::string model_path;
  int64_t block_size = 16;
  int64_t kv_cache_blocks = 0;  // blocks of `block_size` tokens in the pool
};

class ModelRunner {
 public:
  // Opens and validates the model, loads this rank's shard (rank and world size come from
  // `comm`, which must outlive the runner) and allocates the KV pool.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(const ModelRunnerOptions& options,
                                                             Communicator* comm);

  const GgufFile& file() const { return *file_; }
  const ModelConfig& config() const { return config_; }
  LlamaModel& model() { return *model_; }
  const KvCache& kv_cache() const { return *kv_cache_; }

 private:
  ModelRunner() = default;

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  std::unique_ptr<KvCache> kv_cache_;
  std::unique_ptr<LlamaModel> model_;
};

}  // namespace tpserve
