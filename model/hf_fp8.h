// FP8 checkpoints in Hugging Face folders (model/hf_folder.h), as vLLM serves them: weights stored
// as F8_E4M3 with a `<name>_scale` tensor beside each (`q_proj.weight` and
// `q_proj.weight_scale`), one scale for the tensor or one per output row, in the layouts that
// llm-compressor ("compressed-tensors", strategy "tensor" or "channel") and NVIDIA ModelOpt
// ("modelopt", quant_algo "FP8") write. Static activation scales (`input_scale`) are read past:
// activations are quantized per token at run time. Calibrated KV-cache scales (`k_scale`,
// `v_scale`, or one `kv_scale` for both; one per layer or one per KV head) where llm-compressor,
// ModelOpt and AutoFP8 put them become the view's KCacheScaleName/VCacheScaleName tensors, which
// --kv-cache-dtype fp8 stores K and V at; such scales anywhere else are read past. The
// weights keep their codes in the mapped files; the view gives each its row scales
// (GgufTensorInfo::row_scales).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/ggml_type.h"
#include "model/safetensors_file.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// OK when config.json's quantization_config (absent, or null) describes FP8 weights this loader
// reads; INVALID_ARGUMENT naming the method, type or strategy otherwise (INT4 groups, FP8 blocks,
// an unknown quant_method).
absl::Status CheckFp8Quantization(const nlohmann::json& config);

// Whether a tensor of a folder is an FP8 weight's scale (`.weight_scale`), or a scale read past
// (`.input_scale`, and `.k_scale`, `.v_scale`, `.kv_scale` the view does not map).
bool IsWeightScale(const std::string& hf_name);
bool IsScaleReadPast(const std::string& hf_name);

// The names a model file gives layer `layer`'s KV-cache scales: one value for the layer or one per
// KV head (LoadShardWeights, worker/shard_loader.cc, reads them). GGUF files have none; a folder's
// view makes them from its `k_scale`, `v_scale` and `kv_scale` tensors.
std::string KCacheScaleName(int64_t layer);
std::string VCacheScaleName(int64_t layer);

// The element type of a scale tensor (weight, KV-cache): F32, BF16 or F16; INVALID_ARGUMENT naming
// the tensor and its dtype otherwise.
absl::StatusOr<GgmlType> ScaleType(const SafetensorsTensor& scale);

// The scales of a [rows, cols] FP8 weight from its scale tensor (F32, BF16 or F16; shape [], [1],
// [rows] or [rows, 1]) whose data are `bytes`: one value, or one per row. INVALID_ARGUMENT naming
// the tensor for another dtype or shape, or a scale that is not finite and positive.
absl::StatusOr<std::vector<float>> Fp8RowScales(const SafetensorsTensor& scale,
                                                absl::Span<const uint8_t> bytes, int64_t rows);

}  // namespace tpserve
