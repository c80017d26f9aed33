// The rotary frequencies of a model: what its RoPE scaling (ModelConfig::rope_scaling) makes of
// theta^(-2i / rope_dims), computed once at load for both devices' RoPE kernels.
#pragma once

#include <cstdint>
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

// Those of Gemma 3's local layers (ModelConfig::IsLocalLayer): theta = rope_theta_local, no
// scaling.
std::vector<double> LocalRopeInverseFrequencies(const ModelConfig& config);

// Llama-3.1's "llama3" rule, as a Hugging Face rope_scaling gives it.
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_context = 8192;  // original_max_position_embeddings
};

// [rope_dims / 2] divisors of theta^(-2i / rope_dims), as llama.cpp's converter stores them in
// rope_freqs.weight: pairs whose wavelength is shorter than original_context / high_freq_factor
// keep their frequency, those longer than original_context / low_freq_factor are slowed by
// `factor`, and the band between is interpolated.
std::vector<float> Llama3FrequencyDivisors(double theta, int64_t rope_dims,
                                           const Llama3RopeScaling& scaling);

}  // namespace tpserve
