#include "worker/cpu_weights.h"

namespace tpserve {

const std::vector<std::string>& CpuWeightsNames() {
  static const std::vector<std::string> names = {"auto", "packed", "packed-a16", "fp32"};
  return names;
}

std::optional<CpuWeights> ParseCpuWeights(std::string_view name) {
  const std::vector<std::string>& names = CpuWeightsNames();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<CpuWeights>(i);
  }
  return std::nullopt;
}

const char* CpuWeightsName(CpuWeights weights) {
  return CpuWeightsNames()[static_cast<size_t>(weights)].c_str();
}

int64_t ParameterCount(const ModelConfig& config) {
  const int64_t hidden = config.hidden_size;
  const int64_t attention =
      hidden * (config.num_heads + 2 * config.num_kv_heads) * config.head_dim +
      config.num_heads * config.head_dim * hidden;
  const int64_t ffn = 3 * hidden * config.intermediate_size;
  const int64_t embeddings = config.vocab_size * hidden * (config.tie_word_embeddings ? 1 : 2);
  return embeddings + config.num_layers * (attention + ffn);
}

CpuWeights ResolveCpuWeights(CpuWeights asked, const ModelConfig& config) {
  if (asked != CpuWeights::kAuto) return asked;
  return ParameterCount(config) < kAutoPacked16MaxParameters ? CpuWeights::kPacked16
                                                             : CpuWeights::kPacked;
}

}  // namespace tpserve
