#include "model/hf_fp8.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/dequantize.h"
#include "model/json_field.h"

namespace tpserve {
namespace {

using json = nlohmann::json;

absl::Status Refuse(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "config.json: quantization_config ", what,
      " (FP8 weights are served: compressed-tensors with strategy tensor or channel, modelopt "
      "FP8)"));
}

std::string Text(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// One of compressed-tensors' config_groups: FP8 float weights, per tensor or per channel.
absl::Status CheckGroup(const std::string& name, const json& group) {
  const json& weights = JsonField(group, "weights");
  if (!weights.is_object()) return Refuse(absl::StrCat("group ", name, " has no weights"));
  const json& type = JsonField(weights, "type");
  const json& bits = JsonField(weights, "num_bits");
  if (!type.is_string() || type.get<std::string>() != "float" || !bits.is_number_integer() ||
      bits.get<int64_t>() != 8) {
    return Refuse(
        absl::StrCat("group ", name, " has ", Text(bits), "-bit ", Text(type), " weights"));
  }
  const json& strategy = JsonField(weights, "strategy");
  if (!strategy.is_string() ||
      (strategy.get<std::string>() != "tensor" && strategy.get<std::string>() != "channel")) {
    return Refuse(absl::StrCat("group ", name, " has strategy ", Text(strategy)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckFp8Quantization(const json& config) {
  const json& q = JsonField(config, "quantization_config");
  if (q.is_null()) return absl::OkStatus();
  const json& method = JsonField(q, "quant_method");
  const std::string m = method.is_string() ? method.get<std::string>() : "";
  if (m == "compressed-tensors") {
    if (!JsonField(q, "sparsity_config").is_null()) return Refuse("has a sparsity_config");
    const json& groups = JsonField(q, "config_groups");
    if (!groups.is_object() || groups.empty()) return Refuse("has no config_groups");
    for (const auto& [name, group] : groups.items()) RETURN_IF_ERROR(CheckGroup(name, group));
    return absl::OkStatus();
  }
  if (m == "modelopt") {
    const json& algo = JsonField(q, "quant_algo");
    if (algo.is_string() && algo.get<std::string>() == "FP8") return absl::OkStatus();
    return Refuse(absl::StrCat("quant_algo ", Text(algo)));
  }
  if (m == "fp8") {  // vLLM's own FP8 checkpoints: per-tensor scales, or blocks (refused)
    const json& block = JsonField(q, "weight_block_size");
    if (block.is_null()) return absl::OkStatus();
    return Refuse(absl::StrCat("has weight_block_size ", block.dump()));
  }
  return Refuse(absl::StrCat("quant_method ", Text(method)));
}

bool IsWeightScale(const std::string& hf_name) { return absl::EndsWith(hf_name, ".weight_scale"); }

bool IsScaleReadPast(const std::string& hf_name) {
  return absl::EndsWith(hf_name, ".input_scale") || absl::EndsWith(hf_name, ".k_scale") ||
         absl::EndsWith(hf_name, ".v_scale") || absl::EndsWith(hf_name, ".kv_scale");
}

std::string KCacheScaleName(int64_t layer) { return absl::StrCat("blk.", layer, ".k_cache_scale"); }
std::string VCacheScaleName(int64_t layer) { return absl::StrCat("blk.", layer, ".v_cache_scale"); }

absl::StatusOr<GgmlType> ScaleType(const SafetensorsTensor& scale) {
  const std::optional<GgmlType> type = GgmlTypeOfDtype(scale.dtype);
  if (!type.has_value() || *type == GgmlType::kF8E4M3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", scale.name, " has dtype ", scale.dtype, " (F32, BF16 or F16 scales are read)"));
  }
  return *type;
}

absl::StatusOr<std::vector<float>> Fp8RowScales(const SafetensorsTensor& scale,
                                                absl::Span<const uint8_t> bytes, int64_t rows) {
  const auto refuse = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", scale.name, " ", what));
  };
  ASSIGN_OR_RETURN(const GgmlType type, ScaleType(scale));
  int64_t count = 1;
  for (const int64_t d : scale.shape) count *= d;
  const bool per_tensor = count == 1 && scale.shape.size() <= 1;
  const bool per_row = count == rows && (scale.shape.size() == 1 ||
                                         (scale.shape.size() == 2 && scale.shape[1] == 1));
  if (!per_tensor && !per_row) {
    return refuse(absl::StrCat("has shape [", absl::StrJoin(scale.shape, ", "),
                               "]: one scale or one per row of its ", rows, "-row weight is read"));
  }
  std::vector<float> values(count);
  RETURN_IF_ERROR(Dequantize(type, bytes, absl::MakeSpan(values)));
  for (const float v : values) {
    if (!std::isfinite(v) || v <= 0.0f) return refuse(absl::StrCat("holds the scale ", v));
  }
  return values;
}

}  // namespace tpserve
