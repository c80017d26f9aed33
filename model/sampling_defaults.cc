#include "model/sampling_defaults.h"

#include <algorithm>
#include <optional>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve {
namespace {

using nlohmann::json;

// One recommended setting: its GGUF key, the generation_config.json field it comes from (null:
// none), and the SamplingParams field it fills (its name as FirstInvalidField reports it).
struct Setting {
  const char* key;
  const char* hf_field;
  const char* field;
  float SamplingParams::*member;  // null for top_k, the one integer
};
constexpr Setting kSettings[] = {
    {"general.sampling.temp", "temperature", "temperature", &SamplingParams::temperature},
    {"general.sampling.top_k", "top_k", "top_k", nullptr},
    {"general.sampling.top_p", "top_p", "top_p", &SamplingParams::top_p},
    {"general.sampling.min_p", "min_p", "min_p", &SamplingParams::min_p},
    {"general.sampling.penalty_repeat", "repetition_penalty", "repetition_penalty",
     &SamplingParams::repetition_penalty},
    {"general.sampling.penalty_present", nullptr, "presence_penalty",
     &SamplingParams::presence_penalty},
    {"general.sampling.penalty_freq", nullptr, "frequency_penalty",
     &SamplingParams::frequency_penalty},
};

// The key's value as a number of any GGUF numeric type; nullopt when absent.
absl::StatusOr<std::optional<double>> Number(const GgufFile& file, const char* key) {
  const GgufValue* value = file.Find(key);
  if (value == nullptr) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&value->value)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&value->value)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&value->value)) return *d;
  return absl::InvalidArgumentError(absl::StrCat(key, " is not a number"));
}

void Put(const Setting& setting, double value, SamplingParams* params) {
  if (setting.member != nullptr) {
    params->*setting.member = static_cast<float>(value);
  } else {
    // llama.cpp's convention: top_k <= 0 keeps every token, our 0.
    params->top_k = value > 0 ? static_cast<int32_t>(std::min(value, 2147483647.0)) : 0;
  }
}

}  // namespace

absl::StatusOr<SamplingParams> ModelSamplingDefaults(const GgufFile& file, SamplingParams base,
                                                     std::string* taken) {
  std::vector<std::string> parts;
  for (const Setting& setting : kSettings) {
    absl::StatusOr<std::optional<double>> value = Number(file, setting.key);
    if (!value.ok()) return value.status();
    if (!value->has_value()) continue;
    Put(setting, **value, &base);
    if (const auto error = base.FirstInvalidField();
        error.has_value() && std::string(error->field) == setting.field) {
      return absl::InvalidArgumentError(absl::StrCat(setting.key, ": ", error->message));
    }
    parts.push_back(absl::StrCat(setting.field, " ", **value));
  }
  if (taken != nullptr) *taken = absl::StrJoin(parts, ", ");
  return base;
}

absl::Status AddHfSamplingKeys(const json& generation, GgufWriter* keys) {
  if (!generation.is_object()) return absl::OkStatus();
  for (const Setting& setting : kSettings) {
    if (setting.hf_field == nullptr || !generation.contains(setting.hf_field)) continue;
    const json& value = generation[setting.hf_field];
    if (value.is_null()) continue;
    if (!value.is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("generation_config.json: ", setting.hf_field,
                                                     " is ", value.dump(), ", not a number"));
    }
    if (setting.member == nullptr) {
      if (!value.is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat("generation_config.json: ", setting.hf_field,
                                                       " is ", value.dump(), ", not an integer"));
      }
      const int64_t k = value.get<int64_t>();
      keys->SetInt32(setting.key, static_cast<int32_t>(std::clamp<int64_t>(k, 0, 2147483647)));
    } else {
      keys->SetFloat32(setting.key, value.get<float>());
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve
