#include "worker/loaded_shard.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "model/hf_folder.h"
#include "model/shard_layout.h"
#include "worker/cpu_forward_pass.h"
#include "worker/cuda_backend.h"
#include "worker/shard_loader.h"
#if TPSERVE_WITH_CUDA
#include "worker/cuda/cuda_forward_pass.h"
#endif

namespace tpserve {
namespace {

absl::StatusOr<std::unique_ptr<ForwardPass>> CreateCpuModel(const ModelRunnerOptions& options,
                                                            const ModelConfig& config,
                                                            const ShardLayout& layout,
                                                            ModelWeights weights,
                                                            Communicator* comm) {
  // A pipeline stage's pool holds its own layers, under the coordinator's block ids.
  KvCacheShape shape = KvCacheShape::For(layout.layers.size, layout.kv_heads.size, config.head_dim,
                                         options.block_size, /*cuda=*/false, options.kv_cache_fp8);
  shape.num_blocks = options.kv_cache_blocks > 0 ? options.kv_cache_blocks
                                                 : options.kv_cache_bytes / shape.bytes_per_block();
  if (options.kv_cache_blocks == 0 && options.kv_cache_holds_context) {
    const int64_t context_blocks =
        (config.context_length + shape.block_size - 1) / shape.block_size;
    shape.num_blocks = std::max(shape.num_blocks, context_blocks);
  }
  if (shape.num_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the KV pool needs a positive block count or a byte budget of at least one "
                     "block (",
                     shape.bytes_per_block(), " bytes); got ", options.kv_cache_blocks,
                     " blocks and ", options.kv_cache_bytes, " bytes"));
  }
  LogInfo("runner", "rank %d/%d: weights %.1f MiB, KV pool %lld blocks (%.1f MiB, %s)",
          comm->rank(), comm->world_size(), weights.resident_bytes() / 1048576.0,
          static_cast<long long>(shape.num_blocks),
          shape.num_blocks * shape.bytes_per_block() / 1048576.0, shape.fp8 ? "FP8 E4M3" : "fp32");
  return std::make_unique<CpuForwardPass>(config, layout, std::move(weights), comm, options.links,
                                          shape);
}

absl::Status LoadLoras(const ModelRunnerOptions& options, LoadedShard& shard) {
  for (const ModelRunnerOptions::Lora& lora : options.loras) {
    if (lora.slot < 1 || lora.slot > shard.loras().num_slots()) {
      return absl::InvalidArgumentError(absl::StrCat("LoRA slot ", lora.slot, " is outside [1, ",
                                                     shard.loras().num_slots(), "]"));
    }
    ASSIGN_OR_RETURN(
        std::shared_ptr<const LoraShard> loaded,
        LoadLoraShard(shard.config(), shard.layout(), lora.path, options.max_lora_rank));
    LogInfo("runner", "rank %d: LoRA adapter %s in slot %d (%.1f MiB)", shard.layout().rank,
            lora.path, lora.slot, loaded->bytes / 1048576.0);
    shard.loras().Set(lora.slot, std::move(loaded));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LoadedShard>> LoadShard(const ModelRunnerOptions& options,
                                                       Communicator* comm,
                                                       DeviceCommunicator* device_comm) {
  if (options.block_size <= 0 || options.kv_cache_blocks < 0 || options.kv_cache_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block size (", options.block_size, ") must be positive, KV cache blocks (",
        options.kv_cache_blocks, ") and bytes (", options.kv_cache_bytes, ") not negative"));
  }
  if (options.device == Device::kCpu && options.weights_fp8) {
    return absl::UnimplementedError(
        "--quantization fp8 runs on CUDA workers (FP8 tensor cores); a CPU worker computes with "
        "the model file's own weights (GGUF blocks such as Q4_0, Q8_0 or Q4_K are kept packed)");
  }
#if !TPSERVE_WITH_CUDA
  if (options.device == Device::kCuda) {
    return absl::UnimplementedError(
        "this build has no CUDA backend (configure with -DTPSERVE_CUDA=ON on a machine with the "
        "CUDA toolkit)");
  }
#endif
  if (options.device == Device::kCuda && device_comm == nullptr) {
    return absl::InvalidArgumentError("a CUDA model needs a device communicator");
  }

  CudaDeviceChoice cuda_device;
  if (options.device == Device::kCuda) {  // Before loading: say at once when there is no GPU.
    ASSIGN_OR_RETURN(cuda_device, SelectCudaDevice(options.cuda.device, comm->rank()));
  }
  if (options.max_loras < 0 || options.max_loras > kMaxLoraSlots || options.max_lora_rank < 1 ||
      options.max_lora_rank > kMaxLoraRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA: ", options.max_loras, " slots of rank up to ", options.max_lora_rank,
                     "; at most ", kMaxLoraSlots, " slots of rank up to ", kMaxLoraRank));
  }
  std::unique_ptr<LoadedShard> runner(new LoadedShard());
  runner->loras_ = std::make_shared<LoraTable>(options.max_loras);
  ASSIGN_OR_RETURN(runner->file_, OpenModel(options.model_path));
  ASSIGN_OR_RETURN(runner->config_, ModelConfig::FromGguf(*runner->file_));
  // The CPU's attention applies sliding windows (CpuForwardPass); CUDA's serves the window alone.
  if (options.device == Device::kCpu) runner->config_.ServeWholeContext();
  if (options.num_layers > 0) {
    if (options.num_layers > runner->config_.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("asked for the first ", options.num_layers,
                                                     " layers of a model of ",
                                                     runner->config_.num_layers));
    }
    runner->config_.num_layers = options.num_layers;
  }
  if (options.pipeline_stages > 1 && (options.links == nullptr || options.num_layers > 0)) {
    return absl::InvalidArgumentError(
        "pipeline stages run with links to their neighbours, over the whole model");
  }
  ASSIGN_OR_RETURN(runner->layout_,
                   ShardLayout::Make(runner->config_, comm->rank(), comm->world_size(),
                                     options.pipeline_stage, options.pipeline_stages));
  const ShardLayout& layout = runner->layout_;
  if (options.pipeline_stages > 1) {
    LogInfo("runner", "rank %d/%d of pipeline stage %d/%d: layers %lld to %lld of %d", comm->rank(),
            comm->world_size(), layout.stage, layout.num_stages,
            static_cast<long long>(layout.layers.begin),
            static_cast<long long>(layout.layers.end() - 1), runner->config_.num_layers);
  }
  LogInfo("runner", "rank %d/%d: loading %s (%s)", comm->rank(), comm->world_size(),
          options.model_path, runner->config_.DebugString());
  if (options.device == Device::kCpu) {
    LogInfo("runner", "rank %d/%d: CPU weights %s%s (%.2fB parameters)", comm->rank(),
            comm->world_size(),
            CpuWeightsName(ResolveCpuWeights(options.cpu_weights, runner->config_)),
            options.cpu_weights == CpuWeights::kAuto ? " (auto)" : "",
            static_cast<double>(ParameterCount(runner->config_)) / 1e9);
  }
  ASSIGN_OR_RETURN(ModelWeights weights,
                   LoadShardWeights(*runner->file_, runner->config_, layout,
                                    ShardFormats{options.cpu_weights,
                                                 /*keep_fp8=*/options.device == Device::kCuda},
                                    options.load_progress));
#if TPSERVE_WITH_CUDA
  if (options.device == Device::kCuda) {
    ASSIGN_OR_RETURN(runner->forward_pass_,
                     cuda::CudaForwardPass::Create(options, cuda_device, runner->config_, layout,
                                                   std::move(weights), device_comm));
  }
#endif
  if (runner->forward_pass_ == nullptr) {
    ASSIGN_OR_RETURN(runner->forward_pass_,
                     CreateCpuModel(options, runner->config_, layout, std::move(weights), comm));
  }
  runner->forward_pass_->set_loras(runner->loras_.get());
  RETURN_IF_ERROR(LoadLoras(options, *runner));
  return runner;
}

absl::StatusOr<std::shared_ptr<const LoraShard>> LoadLoraShard(const ModelConfig& config,
                                                               const ShardLayout& layout,
                                                               const std::string& dir,
                                                               int64_t max_rank) {
  ASSIGN_OR_RETURN(const LoraAdapter adapter,
                   LoadLoraAdapter(dir, config, std::min(max_rank, kMaxLoraRank)));
  return std::make_shared<const LoraShard>(ShardLora(adapter, config, layout));
}

}  // namespace tpserve
