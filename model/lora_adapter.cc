#include "model/lora_adapter.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "model/dequantize.h"
#include "model/mapped_file.h"
#include "model/safetensors_file.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::json;

constexpr int64_t kMaxConfigBytes = 1 << 20;
constexpr const char* kTargetNames[kNumLoraTargets] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                       "gate_proj", "up_proj", "down_proj"};

absl::Status Invalid(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

std::optional<LoraTarget> TargetOf(std::string_view name) {
  for (int t = 0; t < kNumLoraTargets; ++t) {
    if (name == kTargetNames[t]) return static_cast<LoraTarget>(t);
  }
  return std::nullopt;
}

// The module's [out, in] in the model.
std::pair<int64_t, int64_t> Shape(LoraTarget target, const ModelConfig& c) {
  const int64_t q = c.num_heads * c.head_dim;
  const int64_t kv = c.num_kv_heads * c.head_dim;
  switch (target) {
    case LoraTarget::kQ:
      return {q, c.hidden_size};
    case LoraTarget::kK:
    case LoraTarget::kV:
      return {kv, c.hidden_size};
    case LoraTarget::kO:
      return {c.hidden_size, q};
    case LoraTarget::kGate:
    case LoraTarget::kUp:
      return {c.intermediate_size, c.hidden_size};
    case LoraTarget::kDown:
      return {c.hidden_size, c.intermediate_size};
  }
  return {0, 0};
}

struct Config {
  int64_t rank = 0;
  double scale = 0;
  bool targets[kNumLoraTargets] = {};
};

// Fields whose value changes what the adapter computes: refused unless at their default.
bool IsDefault(const std::string& key, const json& value) {
  if (value.is_null()) return true;
  if (key == "use_dora" || key == "fan_in_fan_out") return value == false;
  if (key == "bias") return value == "none";
  if (key == "rank_pattern" || key == "alpha_pattern") return value.is_object() && value.empty();
  if (key == "modules_to_save" || key == "layers_to_transform" || key == "layers_pattern") {
    return value.is_array() && value.empty();
  }
  return true;
}

absl::StatusOr<Config> ReadConfig(const std::string& path, int64_t max_rank) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error)
    return absl::NotFoundError(absl::StrCat(path, ": cannot read (", error.message(), ")"));
  if (size > static_cast<uintmax_t>(kMaxConfigBytes)) return Invalid(path, "is over 1 MiB");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const json config = ParseBoundedJson<json>(text.str());
  if (!config.is_object()) return Invalid(path, "is not a JSON object");
  if (config.contains("peft_type") && config["peft_type"] != "LORA") {
    return Invalid(path, "peft_type must be LORA");
  }
  for (const char* key : {"use_dora", "fan_in_fan_out", "bias", "rank_pattern", "alpha_pattern",
                          "modules_to_save", "layers_to_transform", "layers_pattern"}) {
    if (config.contains(key) && !IsDefault(key, config[key])) {
      return Invalid(path, absl::StrCat(key, " ", config[key].dump(), " is not supported"));
    }
  }
  Config out;
  const json r = config.value("r", json());
  if (!r.is_number_integer() || r.get<int64_t>() < 1 || r.get<int64_t>() > max_rank) {
    return Invalid(path,
                   absl::StrCat("r must be an integer in [1, ", max_rank, "] (--max-lora-rank)"));
  }
  out.rank = r.get<int64_t>();
  const json alpha = config.value("lora_alpha", json(out.rank));
  if (!alpha.is_number()) return Invalid(path, "lora_alpha must be a number");
  const json rslora_value = config.value("use_rslora", json(false));
  if (!rslora_value.is_boolean() && !rslora_value.is_null()) {
    return Invalid(path, "use_rslora must be true or false");
  }
  const bool rslora = rslora_value == true;
  out.scale = alpha.get<double>() /
              (rslora ? std::sqrt(static_cast<double>(out.rank)) : static_cast<double>(out.rank));
  const json targets = config.value("target_modules", json());
  std::vector<std::string> names;
  if (targets.is_string()) {
    names = absl::StrSplit(targets.get<std::string>(), ',');
  } else if (targets.is_array()) {
    for (const json& t : targets) {
      if (!t.is_string()) return Invalid(path, "target_modules must hold strings");
      names.push_back(t.get<std::string>());
    }
  } else {
    return Invalid(path, "target_modules must be a list of module names");
  }
  for (const std::string& name : names) {
    const std::optional<LoraTarget> target = TargetOf(name);
    if (!target.has_value()) {
      return Invalid(path, absl::StrCat("target module ", name,
                                        " is not one of q_proj, k_proj, "
                                        "v_proj, o_proj, gate_proj, up_proj, down_proj"));
    }
    out.targets[static_cast<int>(*target)] = true;
  }
  return out;
}

// base_model.model.model.layers.<i>.<self_attn|mlp>.<module>.lora_<A|B>.weight
struct TensorName {
  int64_t layer = 0;
  LoraTarget target = LoraTarget::kQ;
  bool is_a = false;
};
std::optional<TensorName> ParseName(const std::string& name) {
  const std::vector<std::string> parts = absl::StrSplit(name, '.');
  if (parts.size() != 9 || parts[0] != "base_model" || parts[1] != "model" || parts[2] != "model" ||
      parts[3] != "layers" || parts[8] != "weight") {
    return std::nullopt;
  }
  TensorName out;
  if (!absl::SimpleAtoi(parts[4], &out.layer)) return std::nullopt;
  const std::optional<LoraTarget> target = TargetOf(parts[6]);
  if (!target.has_value()) return std::nullopt;
  const bool attention = *target <= LoraTarget::kO;
  if (parts[5] != (attention ? "self_attn" : "mlp")) return std::nullopt;
  out.target = *target;
  if (parts[7] != "lora_A" && parts[7] != "lora_B") return std::nullopt;
  out.is_a = parts[7] == "lora_A";
  return out;
}

absl::StatusOr<std::vector<float>> ToFloats(const SafetensorsTensor& t,
                                            absl::Span<const uint8_t> data,
                                            const std::string& path) {
  const absl::Span<const uint8_t> bytes = data.subspan(t.begin, t.end - t.begin);
  int64_t count = 1;
  for (int64_t d : t.shape) count *= d;
  std::vector<float> out(count);
  if (t.dtype == "F32") {
    std::memcpy(out.data(), bytes.data(), count * sizeof(float));
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    for (int64_t i = 0; i < count; ++i) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = t.dtype == "F16" ? Fp16ToFp32(bits) : Bf16ToFp32(bits);
    }
  } else {
    return Invalid(path, absl::StrCat(t.name, ": dtype ", t.dtype, " is not F32, F16 or BF16"));
  }
  return out;
}

// llama.cpp's q/k permutation (convert_hf_to_gguf.py's permute) of B's rows: within each head,
// row (half h, index i) moves to (index i, half h).
void PermuteRows(std::vector<float>& b, int64_t heads, int64_t head_dim, int64_t rank) {
  std::vector<float> out(b.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t part = 0; part < 2; ++part) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t from = h * head_dim + part * half + i;
        const int64_t to = h * head_dim + i * 2 + part;
        std::copy(b.begin() + from * rank, b.begin() + (from + 1) * rank, out.begin() + to * rank);
      }
    }
  }
  b = std::move(out);
}

}  // namespace

const char* LoraTargetName(LoraTarget target) { return kTargetNames[static_cast<int>(target)]; }

int64_t LoraAdapter::bytes() const {
  int64_t total = 0;
  for (const auto& layer : layers) {
    for (const std::optional<LoraModule>& m : layer) {
      if (m.has_value()) total += static_cast<int64_t>((m->a.size() + m->b.size()) * sizeof(float));
    }
  }
  return total;
}

absl::StatusOr<LoraAdapter> LoadLoraAdapter(const std::string& dir, const ModelConfig& config,
                                            int64_t max_rank) {
  const std::string config_path = (std::filesystem::path(dir) / "adapter_config.json").string();
  ASSIGN_OR_RETURN(const Config c, ReadConfig(config_path, max_rank));
  const std::string path = (std::filesystem::path(dir) / "adapter_model.safetensors").string();
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  ASSIGN_OR_RETURN(const SafetensorsHeader header, ParseSafetensors(file->bytes(), path));
  LoraAdapter adapter;
  adapter.rank = c.rank;
  adapter.layers.resize(config.num_layers);
  for (const SafetensorsTensor& t : header.tensors) {
    const std::optional<TensorName> name = ParseName(t.name);
    if (!name.has_value()) {
      return Invalid(path, absl::StrCat(t.name, " is not a LoRA A or B weight of a layer's ",
                                        "attention or MLP projection"));
    }
    if (name->layer < 0 || name->layer >= config.num_layers) {
      return Invalid(path, absl::StrCat(t.name, ": the model has ", config.num_layers, " layers"));
    }
    if (!c.targets[static_cast<int>(name->target)]) {
      return Invalid(path, absl::StrCat(t.name, ": ", LoraTargetName(name->target),
                                        " is not among the config's target_modules"));
    }
    const auto [out, in] = Shape(name->target, config);
    const std::vector<int64_t> want =
        name->is_a ? std::vector<int64_t>{c.rank, in} : std::vector<int64_t>{out, c.rank};
    if (t.shape != want) {
      return Invalid(path, absl::StrCat(t.name, ": shape [", absl::StrJoin(t.shape, ", "),
                                        "], the model needs [", absl::StrJoin(want, ", "), "]"));
    }
    ASSIGN_OR_RETURN(std::vector<float> values, ToFloats(t, header.data, path));
    std::optional<LoraModule>& module = adapter.layers[name->layer][static_cast<int>(name->target)];
    if (!module.has_value()) module = LoraModule{in, out, {}, {}};
    (name->is_a ? module->a : module->b) = std::move(values);
  }
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      std::optional<LoraModule>& module = adapter.layers[layer][t];
      if (!module.has_value()) continue;
      if (module->a.empty() || module->b.empty()) {
        return Invalid(path, absl::StrCat("layer ", layer, " ", kTargetNames[t],
                                          " has only one of lora_A and lora_B"));
      }
      for (float& v : module->b) v = static_cast<float>(v * c.scale);
      const auto target = static_cast<LoraTarget>(t);
      if (!config.rope_rotate_half && (target == LoraTarget::kQ || target == LoraTarget::kK)) {
        PermuteRows(module->b, target == LoraTarget::kQ ? config.num_heads : config.num_kv_heads,
                    config.head_dim, c.rank);
      }
    }
  }
  return adapter;
}

}  // namespace tpserve
