// The rotary frequencies of a model: what its RoPE scaling (ModelConfig::rope_scaling) makes of
// theta^(-2i / rope_dims), computed once at load for both devices' RoPE kernels.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "model/gguf_file.h"
#include "model/model_config.h"

namespace tpserve {

// [rope_dims / 2]: pair i of every head is rotated by the angle position × result[i], where
//   result[i] = theta^(-2i / rope_dims)                      kNone
//             = theta^(-2i / rope_dims) / factor             kLinear (positions / factor)
//             = theta^(-2i / rope_dims) / rope_freqs[i]      kLlama3
// in double precision. INVALID_ARGUMENT naming rope_freqs.weight when its shape is not
// [rope_dims / 2] or a factor is not finite and positive.
absl::StatusOr<std::vector<double>> RopeInverseFrequencies(const GgufFile& file,
                                                           const ModelConfig& config);

}  // namespace tpserve
