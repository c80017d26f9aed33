// KV-cache calibration: the scales at which an FP8 KV cache (--kv-cache-dtype fp8) stores a
// model's K and V, measured by running the model over calibration text, as llm-compressor
// calibrates the `k_scale`/`v_scale` of Hugging Face checkpoints: scale = max |value| / 448
// (E4M3's largest) over every token, per layer and KV head (or per layer), K after RoPE. Written
// into a copy of a GGUF model as the tensors the shard loader reads (model/hf_fp8.h's
// KCacheScaleName, VCacheScaleName). tpserve-calibrate-kv is the tool.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/gguf_file.h"
#include "worker/model_runner_options.h"

namespace tpserve {

struct KvCacheScales {
  // [layers][KV heads]; one value per layer, repeated over its heads, when per_layer.
  std::vector<std::vector<float>> k, v;
};

struct KvCalibrationOptions {
  int64_t chunk_tokens = 512;  // the text runs as sequences of this many tokens, each from 0
  // Put before each chunk's text tokens (within chunk_tokens) when not negative: a model that
  // asks for BOS sees it at the start of every sequence it serves, and its first token's K and V
  // differ from a mid-text token's.
  int32_t bos_id = -1;
  bool per_layer = false;  // one K and one V scale per layer instead of one per KV head
  CpuWeights cpu_weights = CpuWeights::kAuto;
  // Called after each chunk with the tokens run so far and in all.
  std::function<void(int64_t done, int64_t total)> progress;
};

// Runs `file`'s model on this process's CPU (all of it: tensor parallel 1) over `tokens`, the
// text's tokens without BOS. INVALID_ARGUMENT for no tokens, a chunk longer than the model's
// context (or with BOS, shorter than 2), or K or V that are not finite.
absl::StatusOr<KvCacheScales> CalibrateKvScales(const GgufFile& file,
                                                absl::Span<const int32_t> tokens,
                                                const KvCalibrationOptions& options);

// `file` written to `path` with `scales` as its KV-cache scale tensors (F32, one per KV head),
// replacing any it had; every other key and tensor as it is.
absl::Status WriteWithKvScales(const GgufFile& file, const KvCacheScales& scales,
                               const std::string& path);

}  // namespace tpserve
