// Reads one rank's slices of a GGUF model into ModelWeights. Only the rank's rows (column-
// parallel) or columns (row-parallel) are kept: Q4_0/Q4_1/Q8_0 linears packed from their blocks
// (row-parallel slices when they fall on block boundaries) unless `weights` asks for fp32,
// everything else decoded to fp32.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "model/shard_layout.h"
#include "worker/model_runner_options.h"
#include "worker/model_weights.h"

namespace tpserve {

// How LoadShardWeights keeps what it reads.
struct ShardFormats {
  // GGUF blocks packed (when they can be) with 8- or 16-bit activations, or fp32; kAuto is
  // resolved for the model (ResolveCpuWeights).
  CpuWeights cpu_weights = CpuWeights::kAuto;
  // The F8_E4M3 projections of an FP8 checkpoint (model/hf_fp8.h) as their codes and row scales,
  // for a CUDA rank's FP8 products; false: decoded to fp32, as a CPU rank computes.
  bool keep_fp8 = false;
};

// Called as loading goes: bytes of the file's tensors whose slices this rank has taken so far,
// and of all of them.
using LoadProgressFn = std::function<void(int64_t done_bytes, int64_t total_bytes)>;

// Errors name the tensor and the expected and found shapes. Logs progress per layer and reports
// it to `progress` (when set) after the embedding and output head and after each layer.
absl::StatusOr<ModelWeights> LoadShardWeights(const GgufFile& file, const ModelConfig& config,
                                              const ShardLayout& layout,
                                              const ShardFormats& formats,
                                              const LoadProgressFn& progress = nullptr);

}  // namespace tpserve
