#include "model/hf_folder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "model/gguf_writer.h"
#include "model/hf_fp8.h"
#include "model/hf_tokenizer.h"
#include "model/json_field.h"
#include "model/mapped_file.h"
#include "model/rope_frequencies.h"
#include "model/safetensors_file.h"
#include "model/sampling_defaults.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::json;

// Beyond any real config or tokenizer file (a 256K-token tokenizer.json is ~20 MB, 6 deep).
constexpr int64_t kMaxConfigBytes = int64_t{64} << 20;

absl::Status Error(absl::string_view file, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", what));
}

// The text of `dir`/`name`; nullopt when the file does not exist.
absl::StatusOr<std::optional<std::string>> ReadText(const std::filesystem::path& dir,
                                                    const std::string& name) {
  const std::filesystem::path path = dir / name;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  if (std::filesystem::file_size(path, ec) > static_cast<uintmax_t>(kMaxConfigBytes) || ec) {
    return Error(path.string(), absl::StrCat("is unreadable or over ", kMaxConfigBytes, " bytes"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(path.string(), "cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<json> ParseJson(const std::filesystem::path& dir, const std::string& name,
                               const std::string& text) {
  // Copying or printing a value recurses: a file nested deeper than any real one is refused first.
  if (JsonNestingDepth(text) > kMaxJsonDepth) {
    return Error((dir / name).string(), absl::StrCat("nests deeper than ", kMaxJsonDepth));
  }
  json parsed = json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return Error((dir / name).string(), "is not a JSON object");
  }
  return parsed;
}

// The parsed `name`, or null when the folder has none.
absl::StatusOr<json> ReadOptionalJson(const std::filesystem::path& dir, const std::string& name) {
  ASSIGN_OR_RETURN(const std::optional<std::string> text, ReadText(dir, name));
  if (!text.has_value()) return json();
  return ParseJson(dir, name, *text);
}

// config.json's fields, read with their types checked.
class Config {
 public:
  explicit Config(const json& config) : config_(config) {}

  absl::StatusOr<int64_t> Int(const char* field, std::optional<int64_t> fallback = {}) const {
    const auto it = config_.find(field);
    if (it == config_.end() || it->is_null()) {
      if (fallback.has_value()) return *fallback;
      return Error("config.json", absl::StrCat(field, " is missing"));
    }
    if (!it->is_number_integer())
      return Error("config.json", absl::StrCat(field, " is not an integer"));
    return it->get<int64_t>();
  }
  absl::StatusOr<double> Number(const char* field, std::optional<double> fallback = {}) const {
    const auto it = config_.find(field);
    if (it == config_.end() || it->is_null()) {
      if (fallback.has_value()) return *fallback;
      return Error("config.json", absl::StrCat(field, " is missing"));
    }
    if (!it->is_number()) return Error("config.json", absl::StrCat(field, " is not a number"));
    return it->get<double>();
  }
  const json& raw() const { return config_; }

 private:
  const json& config_;
};

// The GGUF architecture of config.json's `architectures`.
absl::StatusOr<std::string> Architecture(const json& config) {
  const json& names = JsonField(config, "architectures");
  const std::string name =
      names.is_array() && !names.empty() && names[0].is_string() ? names[0].get<std::string>() : "";
  if (name == "LlamaForCausalLM" || name == "MistralForCausalLM") return "llama";
  if (name == "Qwen2ForCausalLM") return "qwen2";
  if (name == "Qwen3ForCausalLM") return "qwen3";
  if (name == "Phi3ForCausalLM") return "phi3";
  if (name == "Gemma3ForCausalLM") return "gemma3";
  return Error("config.json", absl::StrCat("architectures ", names.dump(),
                                           " is not supported (LlamaForCausalLM, "
                                           "MistralForCausalLM, Qwen2ForCausalLM, "
                                           "Qwen3ForCausalLM, Phi3ForCausalLM and "
                                           "Gemma3ForCausalLM are)"));
}

// Llama-3.1's "llama3" rule from Hugging Face's rope_scaling: rope_freqs.weight's divisors.
absl::StatusOr<std::vector<float>> Llama3RopeFactors(const json& scaling, double theta,
                                                     int64_t rope_dims) {
  const auto number = [&](const char* field) -> absl::StatusOr<double> {
    if (!scaling.contains(field) || !scaling[field].is_number()) {
      return Error("config.json", absl::StrCat("rope_scaling.", field, " is missing"));
    }
    return scaling[field].get<double>();
  };
  Llama3RopeScaling rule;
  ASSIGN_OR_RETURN(rule.factor, number("factor"));
  ASSIGN_OR_RETURN(rule.low_freq_factor, number("low_freq_factor"));
  ASSIGN_OR_RETURN(rule.high_freq_factor, number("high_freq_factor"));
  ASSIGN_OR_RETURN(rule.original_context, number("original_max_position_embeddings"));
  if (!(rule.factor > 0) || !(rule.low_freq_factor > 0) ||
      !(rule.high_freq_factor > rule.low_freq_factor) || !(rule.original_context > 0)) {
    return Error("config.json",
                 "rope_scaling needs factor > 0 and high_freq_factor > "
                 "low_freq_factor > 0 and original_max_position_embeddings > 0");
  }
  return Llama3FrequencyDivisors(theta, rope_dims, rule);
}

// Gemma 3's choices that its GGUF files leave to llama.cpp's defaults, as tpserve.* keys when the
// folder's differ from them; a pattern of local and global layers other than every 6th global,
// and soft-capping, are refused.
absl::Status AddGemma3Keys(const Config& c, int64_t head_dim, GgufWriter* keys) {
  keys->SetFloat32("tpserve.norm.weight_offset", 1.0f);  // Gemma3RMSNorm's 1 + w
  if (const json& act = JsonField(c.raw(), "hidden_activation");
      !act.is_null() && act != "gelu_pytorch_tanh") {
    return Error("config.json", absl::StrCat("hidden_activation ", act.dump(),
                                             " is not supported (gelu_pytorch_tanh is)"));
  }
  ASSIGN_OR_RETURN(const double scalar,
                   c.Number("query_pre_attn_scalar", static_cast<double>(head_dim)));
  keys->SetFloat32("tpserve.attention.query_pre_attn_scalar", static_cast<float>(scalar));
  ASSIGN_OR_RETURN(const double local_base, c.Number("rope_local_base_freq", 10000.0));
  keys->SetFloat32("tpserve.rope.freq_base_local", static_cast<float>(local_base));
  ASSIGN_OR_RETURN(const int64_t pattern, c.Int("sliding_window_pattern", 6));
  if (pattern != 6) {
    return Error("config.json", absl::StrCat("sliding_window_pattern ", pattern,
                                             " is not supported (every 6th layer global is)"));
  }
  const json& types = JsonField(c.raw(), "layer_types");
  if (types.is_array()) {
    for (size_t i = 0; i < types.size(); ++i) {
      const bool global = (i + 1) % 6 == 0;
      if (types[i] != (global ? "full_attention" : "sliding_attention")) {
        return Error("config.json", absl::StrCat("layer_types[", i, "] ", types[i].dump(),
                                                 " is not every 6th layer global"));
      }
    }
  }
  for (const char* softcap : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (!JsonField(c.raw(), softcap).is_null()) {
      return Error("config.json", absl::StrCat(softcap, " is not supported"));
    }
  }
  return absl::OkStatus();
}

// The <arch>.* keys of config.json; `rope_factors` receives llama3 scaling's tensor.
absl::Status AddModelKeys(const Config& c, const std::string& arch, GgufWriter* keys,
                          std::vector<float>* rope_factors) {
  const std::string p = arch + ".";
  ASSIGN_OR_RETURN(const int64_t layers, c.Int("num_hidden_layers"));
  ASSIGN_OR_RETURN(const int64_t hidden, c.Int("hidden_size"));
  ASSIGN_OR_RETURN(const int64_t ffn, c.Int("intermediate_size"));
  ASSIGN_OR_RETURN(const int64_t heads, c.Int("num_attention_heads"));
  ASSIGN_OR_RETURN(const int64_t kv_heads, c.Int("num_key_value_heads", heads));
  ASSIGN_OR_RETURN(const int64_t context, c.Int("max_position_embeddings"));
  ASSIGN_OR_RETURN(const double eps, c.Number("rms_norm_eps"));
  ASSIGN_OR_RETURN(const double theta, c.Number("rope_theta", 10000.0));
  for (const auto& [field, value] : {std::pair{"num_hidden_layers", layers},
                                     {"hidden_size", hidden},
                                     {"intermediate_size", ffn},
                                     {"num_attention_heads", heads},
                                     {"num_key_value_heads", kv_heads},
                                     {"max_position_embeddings", context}}) {
    if (value <= 0 || value > (int64_t{1} << 31)) {
      return Error("config.json", absl::StrCat(field, " ", value, " is not in [1, 2^31]"));
    }
  }
  keys->SetString("general.architecture", arch);
  keys->SetUint64(p + "block_count", layers);
  keys->SetUint64(p + "embedding_length", hidden);
  keys->SetUint64(p + "feed_forward_length", ffn);
  keys->SetUint64(p + "attention.head_count", heads);
  keys->SetUint64(p + "attention.head_count_kv", kv_heads);
  keys->SetUint64(p + "context_length", context);
  keys->SetFloat32(p + "attention.layer_norm_rms_epsilon", static_cast<float>(eps));
  keys->SetFloat32(p + "rope.freq_base", static_cast<float>(theta));
  keys->SetBool("tpserve.rope.rotate_half", true);
  // Qwen3 and Mistral Nemo name a head_dim other than hidden / heads.
  const bool named_head_dim = c.raw().contains("head_dim") && !c.raw()["head_dim"].is_null();
  if (!named_head_dim && hidden % heads != 0) {
    return Error("config.json",
                 absl::StrCat("num_attention_heads ", heads, " does not divide hidden_size ",
                              hidden, " and head_dim is absent"));
  }
  ASSIGN_OR_RETURN(const int64_t head_dim, c.Int("head_dim", hidden / heads));
  if (head_dim <= 0 || head_dim > (int64_t{1} << 16) || head_dim % 2 != 0) {
    return Error("config.json", absl::StrCat("head_dim ", head_dim, " is not even in [2, 65536]"));
  }
  keys->SetUint64(p + "attention.key_length", head_dim);
  keys->SetUint64(p + "attention.value_length", head_dim);
  // Qwen declares a window it does not use unless use_sliding_window says so.
  const bool window_used = arch == "llama" || arch == "phi3" || arch == "gemma3" ||
                           c.raw().value("use_sliding_window", false);
  if (arch == "gemma3") RETURN_IF_ERROR(AddGemma3Keys(c, head_dim, keys));
  // Phi-4-mini rotates 3/4 of each head.
  if (const json& partial = JsonField(c.raw(), "partial_rotary_factor");
      !partial.is_null() && !(partial.is_number() && partial.get<double>() == 1.0)) {
    return Error("config.json",
                 absl::StrCat("partial_rotary_factor ", partial.dump(), " is not supported"));
  }
  ASSIGN_OR_RETURN(const int64_t window, c.Int("sliding_window", 0));
  if (window_used && window > 0) keys->SetUint64(p + "attention.sliding_window", window);

  const json& scaling = JsonField(c.raw(), "rope_scaling");
  if (scaling.is_object()) {
    std::string type = scaling.value("rope_type", scaling.value("type", std::string("none")));
    if (type == "default") type = "none";
    if (type == "llama3") {
      ASSIGN_OR_RETURN(*rope_factors, Llama3RopeFactors(scaling, theta, head_dim));
    } else {
      keys->SetString(p + "rope.scaling.type", type);  // ModelConfig refuses all but none, linear
      if (type == "linear") {
        ASSIGN_OR_RETURN(const double factor, Config(scaling).Number("factor"));
        keys->SetFloat32(p + "rope.scaling.factor", static_cast<float>(factor));
      }
    }
  } else if (!scaling.is_null()) {
    return Error("config.json", "rope_scaling is neither an object nor null");
  }
  return absl::OkStatus();
}

// The layer and the rest of a `model.layers.N.<part>` name, or nullopt.
std::optional<std::pair<int64_t, std::string>> LayerPart(const std::string& hf) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (hf.rfind(kPrefix, 0) != 0) return std::nullopt;
  const std::string rest = hf.substr(kPrefix.size());
  const size_t dot = rest.find('.');
  int64_t layer = 0;
  if (dot == std::string::npos || !absl::SimpleAtoi(rest.substr(0, dot), &layer) || layer < 0) {
    return std::nullopt;
  }
  return std::pair{layer, rest.substr(dot + 1)};
}

// The view's names of a calibrated KV-cache scale (hf_fp8.h): `self_attn.k_scale` and
// `self_attn.v_scale` as llm-compressor writes them, `self_attn.k_proj.k_scale` and
// `self_attn.v_proj.v_scale` as ModelOpt does, `self_attn.kv_scale` (both) as AutoFP8 did; empty
// for any other tensor.
std::vector<std::string> KvCacheScaleNames(const std::string& hf) {
  const std::optional<std::pair<int64_t, std::string>> layer_part = LayerPart(hf);
  if (!layer_part.has_value()) return {};
  const auto& [layer, part] = *layer_part;
  if (part == "self_attn.k_scale" || part == "self_attn.k_proj.k_scale") {
    return {KCacheScaleName(layer)};
  }
  if (part == "self_attn.v_scale" || part == "self_attn.v_proj.v_scale") {
    return {VCacheScaleName(layer)};
  }
  if (part == "self_attn.kv_scale") return {KCacheScaleName(layer), VCacheScaleName(layer)};
  return {};
}

// The GGUF name of a Hugging Face tensor; "" for one the forward pass never reads; nullopt for
// one it does not know.
std::optional<std::string> GgufName(const std::string& hf, const std::string& arch) {
  static const auto* const kTop = new absl::flat_hash_map<std::string, std::string>{
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  static const auto* const kLayer = new absl::flat_hash_map<std::string, std::string>{
      {"input_layernorm", "attn_norm"},   {"post_attention_layernorm", "ffn_norm"},
      {"self_attn.q_proj", "attn_q"},     {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},     {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"},      {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},
      // Phi-3's fused projections, as llama.cpp's converter names them.
      {"self_attn.qkv_proj", "attn_qkv"},
      {"mlp.gate_up_proj", "ffn_up"}};
  if (const auto it = kTop->find(hf); it != kTop->end()) return it->second;
  const std::optional<std::pair<int64_t, std::string>> layer_part = LayerPart(hf);
  if (!layer_part.has_value()) return std::nullopt;
  const auto& [layer, part] = *layer_part;
  if (part == "self_attn.rotary_emb.inv_freq") return "";
  const size_t last = part.rfind('.');
  if (last == std::string::npos) return std::nullopt;
  const std::string suffix = part.substr(last + 1);
  const std::string module = part.substr(0, last);
  if (suffix != "weight" && suffix != "bias") return std::nullopt;
  if (arch == "gemma3") {  // norms around each block, as llama.cpp names them
    static const auto* const kGemma = new absl::flat_hash_map<std::string, std::string>{
        {"post_attention_layernorm", "post_attention_norm"},
        {"pre_feedforward_layernorm", "ffn_norm"},
        {"post_feedforward_layernorm", "post_ffw_norm"}};
    if (const auto it = kGemma->find(module); it != kGemma->end()) {
      return absl::StrCat("blk.", layer, ".", it->second, ".", suffix);
    }
  }
  const auto it = kLayer->find(module);
  if (it == kLayer->end()) return std::nullopt;
  return absl::StrCat("blk.", layer, ".", it->second, ".", suffix);
}

// A weight scale found in a weight file, with its bytes, for the FP8 weight it belongs to.
struct FoundScale {
  std::string file;
  SafetensorsTensor tensor;
  absl::Span<const uint8_t> bytes;
};

// The shape config.json implies for a tensor of GGUF name `name` of an `arch` model, row-major;
// nullopt when it implies none (the shard loader and ModelConfig check what is left).
std::optional<std::vector<int64_t>> ExpectedShape(const std::string& name, const Config& c,
                                                  const std::string& arch, int64_t vocab) {
  const int64_t hidden = c.Int("hidden_size").value_or(0);
  const int64_t heads = c.Int("num_attention_heads").value_or(1);
  const int64_t kv_heads = c.Int("num_key_value_heads", heads).value_or(heads);
  const int64_t head_dim = c.Int("head_dim", hidden / std::max<int64_t>(heads, 1)).value_or(0);
  const int64_t ffn = c.Int("intermediate_size").value_or(0);
  const std::string_view n = name;
  const auto ends = [&](std::string_view suffix) {
    return n.size() >= suffix.size() && n.substr(n.size() - suffix.size()) == suffix;
  };
  if (name == "token_embd.weight" || name == "output.weight") {
    return std::vector<int64_t>{vocab, hidden};
  }
  if (name == "output_norm.weight" || ends("attn_norm.weight") || ends("ffn_norm.weight")) {
    return std::vector<int64_t>{hidden};
  }
  if (ends("attn_q_norm.weight") || ends("attn_k_norm.weight")) {
    return std::vector<int64_t>{head_dim};
  }
  if (ends("attn_q.weight")) return std::vector<int64_t>{heads * head_dim, hidden};
  if (ends("attn_qkv.weight")) return std::vector<int64_t>{(heads + 2 * kv_heads) * head_dim, hidden};
  if (ends("attn_k.weight") || ends("attn_v.weight")) {
    return std::vector<int64_t>{kv_heads * head_dim, hidden};
  }
  if (ends("attn_q.bias")) return std::vector<int64_t>{heads * head_dim};
  if (ends("attn_k.bias") || ends("attn_v.bias")) return std::vector<int64_t>{kv_heads * head_dim};
  if (ends("attn_output.weight")) return std::vector<int64_t>{hidden, heads * head_dim};
  if (ends("ffn_up.weight") && arch == "phi3") {
    return std::vector<int64_t>{2 * ffn, hidden};  // [gate | up]
  }
  if (ends("ffn_gate.weight") || ends("ffn_up.weight")) return std::vector<int64_t>{ffn, hidden};
  if (ends("ffn_down.weight")) return std::vector<int64_t>{hidden, ffn};
  return std::nullopt;
}

std::string Shape(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The safetensors files of the folder and, for each tensor name, the file that holds it.
absl::StatusOr<std::map<std::string, std::vector<std::string>>> WeightFiles(
    const std::filesystem::path& dir) {
  std::map<std::string, std::vector<std::string>> files;  // file -> the tensors the index gives it
  ASSIGN_OR_RETURN(const json index, ReadOptionalJson(dir, "model.safetensors.index.json"));
  if (index.is_null()) {
    std::error_code ec;
    if (!std::filesystem::exists(dir / "model.safetensors", ec)) {
      return Error(dir.string(),
                   "holds neither model.safetensors nor model.safetensors.index.json");
    }
    files["model.safetensors"];
    return files;
  }
  const json& map = JsonField(index, "weight_map");
  if (!map.is_object()) {
    return Error("model.safetensors.index.json", "weight_map is not an object");
  }
  for (const auto& [tensor, file] : map.items()) {
    const std::string name = file.is_string() ? file.get<std::string>() : "";
    // A shard is a plain file name inside the folder, never a path out of it.
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return Error("model.safetensors.index.json",
                   absl::StrCat("weight_map gives ", tensor, " the file ", file.dump(),
                                ", which is not a file name inside the folder"));
    }
    files[name].push_back(tensor);
  }
  if (files.empty()) return Error("model.safetensors.index.json", "weight_map is empty");
  return files;
}

// llama3 scaling's divisors as the rope_freqs.weight tensor llama.cpp's converter writes (none
// when `factors` is empty), in a section of their own.
void AddRopeFactors(const std::vector<float>& factors, GgufParts* parts) {
  if (factors.empty()) return;
  GgufTensorInfo info;
  info.name = "rope_freqs.weight";
  info.dims = {static_cast<int64_t>(factors.size())};
  info.type = GgmlType::kF32;
  info.offset = 0;
  info.num_bytes = factors.size() * sizeof(float);
  info.section = static_cast<uint32_t>(parts->sections.size() + parts->owned.size());
  std::vector<uint8_t> bytes(info.num_bytes);
  std::memcpy(bytes.data(), factors.data(), info.num_bytes);
  parts->owned.push_back(std::move(bytes));
  parts->tensors.push_back(std::move(info));
}

// Gives each F8_E4M3 weight the scales of its `_scale` tensor; every weight scale must belong to
// an FP8 weight.
absl::Status AttachFp8Scales(const std::map<std::string, std::string>& fp8_weights,
                             std::map<std::string, FoundScale> scales, GgufParts* parts) {
  for (GgufTensorInfo& info : parts->tensors) {
    const auto weight = fp8_weights.find(info.name);
    if (weight == fp8_weights.end()) continue;
    const auto found = scales.find(weight->second);
    if (found == scales.end()) {
      return Error(weight->second,
                   absl::StrCat("is F8_E4M3, but ", weight->second, "_scale is in no weight file"));
    }
    const int64_t rows = info.dims.size() == 2 ? info.dims[1] : 1;
    absl::StatusOr<std::vector<float>> row_scales =
        Fp8RowScales(found->second.tensor, found->second.bytes, rows);
    if (!row_scales.ok()) return Error(found->second.file, row_scales.status().message());
    info.row_scales = *std::move(row_scales);
    scales.erase(found);
  }
  if (!scales.empty()) {
    const FoundScale& stray = scales.begin()->second;
    return Error(stray.file,
                 absl::StrCat("tensor ", stray.tensor.name, " scales ", scales.begin()->first,
                              ", which is not an F8_E4M3 weight"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::filesystem::path& dir) {
  ASSIGN_OR_RETURN(const std::optional<std::string> config_text, ReadText(dir, "config.json"));
  if (!config_text.has_value()) return Error(dir.string(), "holds no config.json");
  ASSIGN_OR_RETURN(const json config_json, ParseJson(dir, "config.json", *config_text));
  const Config config(config_json);
  ASSIGN_OR_RETURN(const std::string arch, Architecture(config_json));
  RETURN_IF_ERROR(CheckFp8Quantization(config_json));

  GgufParts parts;
  parts.display_name = dir.string();
  parts.identity = *config_text;
  GgufWriter keys;
  std::vector<float> rope_factors;
  RETURN_IF_ERROR(AddModelKeys(config, arch, &keys, &rope_factors));
  keys.SetString("general.name", dir.filename().string());

  ASSIGN_OR_RETURN(const int64_t heads, config.Int("num_attention_heads"));
  ASSIGN_OR_RETURN(const int64_t kv_heads, config.Int("num_key_value_heads", heads));

  // Tensors, file by file.
  ASSIGN_OR_RETURN(const auto files, WeightFiles(dir));
  std::map<std::string, std::string> where;        // GGUF name -> "file: HF name", for errors
  std::map<std::string, std::string> fp8_weights;  // GGUF name -> HF name, of F8_E4M3 weights
  std::map<std::string, FoundScale> scales;        // HF weight name -> its weight_scale
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;  // GGUF name, HF shape
  for (const auto& [file, indexed] : files) {
    absl::StatusOr<std::unique_ptr<MappedFile>> mapping = MappedFile::Open((dir / file).string());
    if (!mapping.ok()) {
      return Error(dir.string(), absl::StrCat("weight file ", file,
                                              " cannot be opened: ", mapping.status().message()));
    }
    ASSIGN_OR_RETURN(const SafetensorsHeader header,
                     ParseSafetensors((*mapping)->bytes(), (dir / file).string()));
    absl::StrAppend(
        &parts.identity, "\n", file, "\n",
        absl::string_view(reinterpret_cast<const char*>(header.json.data()), header.json.size()));
    std::map<std::string, bool> present;
    for (const SafetensorsTensor& t : header.tensors) present[t.name] = true;
    for (const std::string& name : indexed) {
      if (!present.contains(name)) {
        return Error(file, absl::StrCat("holds no tensor ", name,
                                        ", which model.safetensors.index.json places there"));
      }
    }
    const uint32_t section = static_cast<uint32_t>(parts.sections.size());
    parts.sections.push_back(header.data);
    parts.mappings.push_back(*std::move(mapping));
    for (const SafetensorsTensor& t : header.tensors) {
      if (const std::vector<std::string> names = KvCacheScaleNames(t.name); !names.empty()) {
        const absl::StatusOr<GgmlType> type = ScaleType(t);
        if (!type.ok()) return Error(file, type.status().message());
        int64_t count = 1;
        for (const int64_t d : t.shape) count *= d;
        if (count != 1 && count != kv_heads) {
          return Error(file, absl::StrCat("tensor ", t.name, " holds ", count,
                                          " scales: one for the layer or one per KV head (",
                                          kv_heads, ") is read"));
        }
        for (const std::string& name : names) {
          if (where.contains(name)) {
            return Error(file, absl::StrCat("tensor ", t.name, " scales the KV cache of a layer ",
                                            where[name], " scales too"));
          }
          where[name] = absl::StrCat(file, ": ", t.name);
          GgufTensorInfo info;
          info.name = name;
          info.dims = {count};
          info.type = *type;
          info.offset = t.begin;
          info.num_bytes = t.end - t.begin;
          info.section = section;
          parts.tensors.push_back(std::move(info));
        }
        continue;
      }
      if (IsWeightScale(t.name)) {
        const std::string weight = t.name.substr(0, t.name.size() - std::string("_scale").size());
        if (const auto seen = scales.find(weight); seen != scales.end()) {
          return Error(file, absl::StrCat("tensor ", t.name, " is also in ", seen->second.file));
        }
        scales[weight] = FoundScale{file, t, header.data.subspan(t.begin, t.end - t.begin)};
        continue;
      }
      if (IsScaleReadPast(t.name)) continue;
      const std::optional<std::string> gguf = GgufName(t.name, arch);
      if (!gguf.has_value()) {
        return Error(file, absl::StrCat("tensor ", t.name, " is not part of a ", arch,
                                        " model tpserve knows"));
      }
      if (gguf->empty()) continue;
      const std::optional<GgmlType> type = GgmlTypeOfDtype(t.dtype);
      if (!type.has_value()) {
        return Error(file, absl::StrCat("tensor ", t.name, " has dtype ", t.dtype,
                                        " (BF16, F16, F32 and F8_E4M3 are served)"));
      }
      if (*type == GgmlType::kF8E4M3) fp8_weights[*gguf] = t.name;
      if (where.contains(*gguf)) {
        return Error(file, absl::StrCat("tensor ", t.name, " is also in ", where[*gguf]));
      }
      where[*gguf] = absl::StrCat(file, ": ", t.name);
      GgufTensorInfo info;
      info.name = *gguf;
      info.dims.assign(t.shape.rbegin(), t.shape.rend());
      info.type = *type;
      info.offset = t.begin;
      info.num_bytes = t.end - t.begin;
      info.section = section;
      parts.tensors.push_back(std::move(info));
      shapes.emplace_back(*gguf, t.shape);
    }
  }

  // Shapes against config.json, and every layer whole.
  const auto embedding = std::find_if(shapes.begin(), shapes.end(),
                                      [](const auto& s) { return s.first == "token_embd.weight"; });
  if (embedding == shapes.end() || embedding->second.size() != 2) {
    return Error(dir.string(), "model.embed_tokens.weight is missing or not a matrix");
  }
  const int64_t vocab = embedding->second[0];
  // Untied embeddings declared but no lm_head: serving them tied would print garbage.
  const json& tied = JsonField(config_json, "tie_word_embeddings");
  if (tied.is_boolean() && !tied.get<bool>() && !where.contains("output.weight")) {
    return Error(dir.string(),
                 "config.json says tie_word_embeddings false, but lm_head.weight is "
                 "in no weight file");
  }
  if (const int64_t declared = config.Int("vocab_size", vocab).value_or(vocab); declared != vocab) {
    return Error("config.json", absl::StrCat("vocab_size ", declared, " disagrees with the ", vocab,
                                             " rows of model.embed_tokens.weight"));
  }
  for (const auto& [name, shape] : shapes) {
    const std::optional<std::vector<int64_t>> want = ExpectedShape(name, config, arch, vocab);
    if (want.has_value() && *want != shape) {
      return Error(where[name], absl::StrCat("shape ", Shape(shape),
                                             " disagrees with config.json (", Shape(*want), ")"));
    }
  }
  ASSIGN_OR_RETURN(const int64_t layers, config.Int("num_hidden_layers"));
  for (int64_t layer = 0; layer < layers; ++layer) {
    const std::vector<const char*> fused = {"input_layernorm",  "self_attn.qkv_proj",
                                            "self_attn.o_proj", "post_attention_layernorm",
                                            "mlp.gate_up_proj", "mlp.down_proj"};
    const std::vector<const char*> split = {
        "input_layernorm",          "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
        "self_attn.o_proj",         "post_attention_layernorm",
        "mlp.gate_proj",            "mlp.up_proj",      "mlp.down_proj"};
    for (const char* part : arch == "phi3" ? fused : split) {
      const std::string hf = absl::StrCat("model.layers.", layer, ".", part, ".weight");
      if (!where.contains(*GgufName(hf, arch))) {
        return Error(dir.string(), absl::StrCat(hf, " is in no weight file"));
      }
    }
  }
  RETURN_IF_ERROR(AttachFp8Scales(fp8_weights, scales, &parts));
  AddRopeFactors(rope_factors, &parts);

  // The tokenizer.
  ASSIGN_OR_RETURN(const std::optional<std::string> tokenizer_text,
                   ReadText(dir, "tokenizer.json"));
  if (!tokenizer_text.has_value()) return Error(dir.string(), "holds no tokenizer.json");
  ASSIGN_OR_RETURN(const json tokenizer, ParseJson(dir, "tokenizer.json", *tokenizer_text));
  ASSIGN_OR_RETURN(const json tokenizer_config, ReadOptionalJson(dir, "tokenizer_config.json"));
  ASSIGN_OR_RETURN(const json generation, ReadOptionalJson(dir, "generation_config.json"));
  RETURN_IF_ERROR(AddHfTokenizerKeys(tokenizer, tokenizer_config, generation, vocab, &keys));
  RETURN_IF_ERROR(AddHfSamplingKeys(generation, &keys));

  parts.metadata = keys.metadata();
  return GgufFile::Assemble(std::move(parts));
}

absl::StatusOr<ModelConfig> ConfigShape(const std::filesystem::path& dir) {
  ASSIGN_OR_RETURN(const std::optional<std::string> config_text, ReadText(dir, "config.json"));
  if (!config_text.has_value()) return Error(dir.string(), "holds no config.json");
  ASSIGN_OR_RETURN(const json config_json, ParseJson(dir, "config.json", *config_text));
  const Config config(config_json);
  ASSIGN_OR_RETURN(const std::string arch, Architecture(config_json));
  GgufParts parts;
  parts.display_name = dir.string();
  parts.identity = *config_text;
  GgufWriter keys;
  std::vector<float> rope_factors;
  RETURN_IF_ERROR(AddModelKeys(config, arch, &keys, &rope_factors));
  // Without the embedding, the vocabulary is config.json's word.
  ASSIGN_OR_RETURN(const int64_t vocab, config.Int("vocab_size"));
  keys.SetUint64(arch + ".vocab_size", vocab);
  AddRopeFactors(rope_factors, &parts);
  parts.metadata = keys.metadata();
  ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> view, GgufFile::Assemble(std::move(parts)));
  ASSIGN_OR_RETURN(ModelConfig shape, ModelConfig::FromGguf(*view));
  // Without an lm_head tensor to miss, config.json says whether the embedding serves as one.
  shape.tie_word_embeddings = config_json.value("tie_word_embeddings", false);
  return shape;
}

// `open` of the folder `dir` names. json::value() throws when a field holds another type than
// its default: such a folder is refused like any other malformed one.
template <typename F>
auto InFolder(const std::string& dir, F open) -> decltype(open(std::filesystem::path())) {
  try {
    std::filesystem::path path = std::filesystem::path(dir).lexically_normal();
    if (!path.has_filename()) path = path.parent_path();  // "dir/"
    return open(path);
  } catch (const std::exception& e) {
    return Error(dir,
                 absl::StrCat("config.json has a field of an unexpected type (", e.what(), ")"));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<GgufFile>> OpenHfFolder(const std::string& dir) {
  return InFolder(dir, Open);
}

absl::StatusOr<ModelConfig> HfFolderShape(const std::string& dir) {
  return InFolder(dir, ConfigShape);
}

absl::StatusOr<std::unique_ptr<GgufFile>> OpenModel(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return OpenHfFolder(path);
  return GgufFile::Open(path);
}

}  // namespace tpserve
