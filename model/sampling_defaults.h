// The sampling a model's authors recommend for requests that do not choose their own, as GGUF's
// general.sampling.* keys carry it: llama.cpp's converter writes them from generation_config.json,
// and OpenHfFolder does the same for a folder (AddHfSamplingKeys). vLLM applies a folder's
// generation_config.json the same way (its --generation-config auto).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kernels/sampling_params.h"
#include "model/gguf_file.h"
#include "model/gguf_writer.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// `base` with each general.sampling.* key the file holds put in its field: temp → temperature,
// top_k, top_p, min_p, penalty_repeat → repetition_penalty, penalty_present → presence_penalty,
// penalty_freq → frequency_penalty. INVALID_ARGUMENT naming the key when a value has another
// type or lies outside the field's range (SamplingParams::Validate). `taken`, when given, says
// what came from the file, for the start-up log: "temperature 0.6, top_p 0.9", or "".
absl::StatusOr<SamplingParams> ModelSamplingDefaults(const GgufFile& file, SamplingParams base,
                                                     std::string* taken = nullptr);

// generation_config.json's temperature, top_k, top_p, min_p and repetition_penalty as the
// general.sampling.* keys. `generation` may be null (no file). INVALID_ARGUMENT naming the field
// when one is not a number.
absl::Status AddHfSamplingKeys(const nlohmann::json& generation, GgufWriter* keys);

}  // namespace tpserve
