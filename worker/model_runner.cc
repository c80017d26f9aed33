#include "worker/model_runner.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/shard_layout.h"
#include "worker/shard_loader.h"

namespace tpserve {

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    const ModelRunnerOptions& options, Communicator* comm) {
  if (options.block_size <= 0 || options.kv_cache_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block size (", options.block_size,
                                                   ") and KV cache blocks (",
                                                   options.kv_cache_blocks,
                                                   ") must be positive"));
  }
  std::unique_ptr<ModelRunner> runner(new ModelRunner());
  ASSIGN_OR_RETURN(runner->file_, GgufFile::Open(options.model_path));
  ASSIGN_OR_RETURN(runner->config_, ModelConfig::FromGguf(*runner->file_));
  ASSIGN_OR_RETURN(const ShardLayout layout,
                   ShardLayout::Make(runner->config_, comm->rank(), comm->world_size()));
  LogInfo("runner", "rank %d/%d: loading %s (%s)", comm->rank(), comm->world_size(),
          options.model_path, runner->config_.DebugString());
  ASSIGN_OR_RETURN(ModelWeights weights, LoadShard(*runner->file_, runner->config_, layout));
  KvCacheShape shape;
  shape.num_layers = runner->config_.num_layers;
  shape.num_blocks = options.kv_cache_blocks;
  shape.block_size = options.block_size;
  shape.num_kv_heads = layout.kv_heads.size;
  shape.head_dim = runner->config_.head_dim;
  runner->kv_cache_ = std::make_unique<KvCache>(shape);
  LogInfo("runner", "rank %d/%d: weights %.1f MiB, KV pool %lld blocks (%.1f MiB)", comm->rank(),
          comm->world_size(), weights.resident_bytes() / 1048576.0,
          static_cast<long long>(shape.num_blocks), runner->kv_cache_->bytes() / 1048576.0);
  runner->model_ = std::make_unique<LlamaModel>(runner->config_, layout, std::move(weights), comm,
                                                runner->kv_cache_.get());
  return runner;
}

}  // namespace tpserve
