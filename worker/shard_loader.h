// Reads one rank's slices of a GGUF model into ModelWeights. Only the rank's rows (column-
// parallel) or columns (row-parallel) are kept: Q4_0/Q4_1/Q8_0 linears packed from their blocks
// (row-parallel slices when they fall on block boundaries) unless `weights` asks for fp32,
// everything else decoded to fp32.
#pragma once

#include "absl/status/statusor.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "model/shard_layout.h"
#include "worker/model_runner_options.h"
#include "worker/model_weights.h"

namespace tpserve {

// How LoadShard keeps what it reads.
struct ShardFormats {
  CpuWeights cpu_weights = CpuWeights::kPacked;  // GGUF blocks packed (when they can be), or fp32
  // The F8_E4M3 projections of an FP8 checkpoint (model/hf_fp8.h) as their codes and row scales,
  // for a CUDA rank's FP8 products; false: decoded to fp32, as a CPU rank computes.
  bool keep_fp8 = false;
};

// Errors name the tensor and the expected and found shapes. Logs progress per layer.
absl::StatusOr<ModelWeights> LoadShard(const GgufFile& file, const ModelConfig& config,
                                       const ShardLayout& layout, const ShardFormats& formats);

}  // namespace tpserve
