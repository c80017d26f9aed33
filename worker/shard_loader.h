// Reads one rank's slices of a GGUF model into fp32 ModelWeights. Only the rank's rows (column-
// parallel) or columns (row-parallel) are dequantized and kept; the file stays memory-mapped.
#pragma once

#include "absl/status/statusor.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "worker/model_weights.h"
#include "worker/shard_layout.h"

namespace tpserve {

// Errors name the tensor and the expected and found shapes. Logs progress per layer.
absl::StatusOr<ModelWeights> LoadShard(const GgufFile& file, const ModelConfig& config,
                                       const ShardLayout& layout);

}  // namespace tpserve
