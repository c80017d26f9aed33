#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace tpserve {
namespace {

// Upper bound for every size in the config; larger values are corrupt, not real models.
constexpr int64_t kMaxSize = int64_t{1} << 31;

absl::Status ConfigError(std::string_view key, absl::string_view problem) {
  // The API takes std::string_view; this Abseil build's string_view is its own type.
  return absl::InvalidArgumentError(
      absl::StrCat("model config: ", absl::string_view(key.data(), key.size()), ": ", problem));
}

// A size in [1, kMaxSize) at `key`, or `fallback` when the key is absent and a fallback is given.
absl::StatusOr<int64_t> ReadSize(const GgufFile& file, std::string_view key,
                                 std::optional<int64_t> fallback = std::nullopt) {
  const absl::StatusOr<uint64_t> value = file.GetUint(key);
  if (absl::IsNotFound(value.status())) {
    if (fallback.has_value()) return *fallback;
    return ConfigError(key, "required key is missing");
  }
  if (!value.ok()) return ConfigError(key, value.status().message());
  if (*value == 0 || *value >= static_cast<uint64_t>(kMaxSize)) {
    return ConfigError(key, absl::StrCat("value ", *value, " is not in [1, ", kMaxSize, ")"));
  }
  return static_cast<int64_t>(*value);
}

// A finite positive float at `key`, or `fallback` when absent and a fallback is given.
absl::StatusOr<float> ReadPositiveFloat(const GgufFile& file, std::string_view key,
                                        std::optional<float> fallback = std::nullopt) {
  const absl::StatusOr<double> value = file.GetFloat(key);
  if (absl::IsNotFound(value.status())) {
    if (fallback.has_value()) return *fallback;
    return ConfigError(key, "required key is missing");
  }
  if (!value.ok()) return ConfigError(key, value.status().message());
  if (!std::isfinite(*value) || *value <= 0) {
    return ConfigError(key, absl::StrCat("value ", *value, " is not a finite positive number"));
  }
  return static_cast<float>(*value);
}

// The attention window at `key`; 0 when absent or 0, which is how converters say "no window"
// (Llama 4's all-full-attention layers).
absl::StatusOr<int64_t> ReadSlidingWindow(const GgufFile& file, const std::string& key) {
  if (file.Find(key) == nullptr) return 0;
  const absl::StatusOr<uint64_t> value = file.GetUint(key);
  if (value.ok() && *value == 0) return 0;
  return ReadSize(file, key);
}

// Vocabulary size: <arch>.vocab_size, else the token list's length, else token_embd rows.
absl::StatusOr<int64_t> ReadVocabSize(const GgufFile& file, const std::string& arch) {
  const std::string key = arch + ".vocab_size";
  if (file.Find(key) != nullptr) return ReadSize(file, key);
  if (const GgufValue* tokens = file.Find("tokenizer.ggml.tokens"); tokens != nullptr) {
    if (tokens->type != GgufValueType::kArray) {
      return ConfigError("tokenizer.ggml.tokens", "is not an array");
    }
    const size_t n = std::get<GgufArray>(tokens->value).values.size();
    if (n == 0) return ConfigError("tokenizer.ggml.tokens", "is empty");
    return static_cast<int64_t>(n);
  }
  if (const GgufTensorInfo* embd = file.FindTensor("token_embd.weight"); embd != nullptr) {
    if (embd->dims.size() != 2 || embd->dims[1] <= 0) {
      return ConfigError("token_embd.weight", "is not a 2-d tensor [hidden, vocab]");
    }
    return embd->dims[1];
  }
  return ConfigError(key,
                     "missing, and neither tokenizer.ggml.tokens nor token_embd.weight is present");
}

// The scaling that `<arch>.rope.scaling.*` and rope_freqs.weight describe, as llama.cpp reads
// them: an absent type means linear, and a linear factor of 0 or 1 (or none) scales nothing.
absl::Status ReadRopeScaling(const GgufFile& file, const std::string& arch, ModelConfig* c) {
  const std::string type_key = arch + ".rope.scaling.type";
  std::string type = "linear";
  if (file.Find(type_key) != nullptr) {
    absl::StatusOr<std::string> value = file.GetString(type_key);
    if (!value.ok()) return ConfigError(type_key, value.status().message());
    type = *value;
  }
  const bool freq_factors = file.FindTensor("rope_freqs.weight") != nullptr;
  // Phi-3's 128k variants (longrope): short and long factors switched by the context's length.
  for (const char* longrope : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (file.FindTensor(longrope) != nullptr) {
      return ConfigError(longrope, "longrope RoPE scaling (Phi-3 128k) is not supported");
    }
  }
  if (type != "none" && type != "linear" && type != "llama3") {
    return ConfigError(type_key, absl::StrCat("RoPE scaling '", absl::CHexEscape(type),
                                              "' is not supported (none, linear and llama3 are)"));
  }
  if (type == "llama3" && !freq_factors) {
    return ConfigError(type_key,
                       "llama3 scaling needs its per-frequency factors in the tensor "
                       "rope_freqs.weight (as llama.cpp's converter writes them), which is absent");
  }
  float factor = 1.0f;
  if (type == "linear") {
    std::string factor_key = arch + ".rope.scaling.factor";
    if (file.Find(factor_key) == nullptr) factor_key = arch + ".rope.scale_linear";
    if (file.Find(factor_key) != nullptr) {
      const absl::StatusOr<double> value = file.GetFloat(factor_key);
      if (!value.ok()) return ConfigError(factor_key, value.status().message());
      if (!std::isfinite(*value) || *value < 0) {
        return ConfigError(factor_key,
                           absl::StrCat("value ", *value, " is not a finite non-negative number"));
      }
      if (*value != 0) factor = static_cast<float>(*value);
    }
    if (factor != 1.0f && freq_factors) {
      return ConfigError(factor_key, absl::StrCat("linear RoPE scaling by ", factor,
                                                  " together with rope_freqs.weight (llama3 "
                                                  "scaling) is not supported"));
    }
  }
  if (freq_factors) {
    c->rope_scaling = RopeScaling::kLlama3;
  } else if (factor != 1.0f) {
    c->rope_scaling = RopeScaling::kLinear;
    c->rope_scaling_factor = factor;
  }
  return absl::OkStatus();
}

// Gemma 3's choices, which llama.cpp fixes for the architecture rather than storing them: the
// local/global pattern (every 6th layer global), the local layers' base of 10000, and the
// attention scale.
absl::Status ReadGemma3(const GgufFile& file, ModelConfig* c) {
  c->ffn_activation = FfnActivation::kGeluTanh;
  c->embedding_scale = std::sqrt(static_cast<float>(c->hidden_size));
  c->block_output_norms = true;
  c->local_layer_period = 6;
  c->rope_theta_local = 10000.0f;
  constexpr char kScalar[] = "tpserve.attention.query_pre_attn_scalar";
  float scalar =
      static_cast<float>(c->num_layers == 62 ? c->hidden_size / c->num_heads : c->head_dim);
  if (file.Find(kScalar) != nullptr) {
    ASSIGN_OR_RETURN(scalar, ReadPositiveFloat(file, kScalar));
  }
  c->attention_scale = 1.0f / std::sqrt(scalar);
  constexpr char kOffset[] = "tpserve.norm.weight_offset";
  if (file.Find(kOffset) != nullptr) {
    ASSIGN_OR_RETURN(c->norm_weight_offset, ReadPositiveFloat(file, kOffset));
  }
  constexpr char kLocalBase[] = "tpserve.rope.freq_base_local";
  if (file.Find(kLocalBase) != nullptr) {
    ASSIGN_OR_RETURN(c->rope_theta_local, ReadPositiveFloat(file, kLocalBase));
  }
  for (const char* softcap : {"gemma3.attn_logit_softcapping", "gemma3.final_logit_softcapping"}) {
    if (file.Find(softcap) != nullptr) {
      return ConfigError(softcap, "logit soft-capping is not supported (Gemma 3 has none)");
    }
  }
  return absl::OkStatus();
}

// q/k/v biases are all present or all absent, on every layer; biases this forward pass has no
// place for are refused rather than ignored (the model would run and print garbage). The checks
// walk the file's tensors, never block_count's layers alone: a file may declare 2^31 - 1.
absl::Status ReadBiases(const GgufFile& file, ModelConfig* c) {
  c->qkv_bias = file.FindTensor("blk.0.attn_q.bias") != nullptr;
  for (const GgufTensorInfo& tensor : file.tensors()) {
    if (!absl::EndsWith(tensor.name, ".bias")) continue;
    const bool qkv = absl::EndsWith(tensor.name, ".attn_q.bias") ||
                     absl::EndsWith(tensor.name, ".attn_k.bias") ||
                     absl::EndsWith(tensor.name, ".attn_v.bias");
    if (!qkv || !c->qkv_bias) {
      return ConfigError(tensor.name, qkv ? "is present while blk.0.attn_q.bias is absent"
                                          : "bias tensors on this projection are not supported");
    }
  }
  if (!c->qkv_bias) return absl::OkStatus();
  // Returns at the first layer without its biases, so at most one layer past the file's tensors.
  for (int64_t layer = 0; layer < c->num_layers; ++layer) {
    for (const char* name : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
      const std::string tensor = absl::StrCat("blk.", layer, ".", name);
      if (file.FindTensor(tensor) == nullptr) {
        return ConfigError(tensor, "is missing while blk.0.attn_q.bias is present");
      }
    }
  }
  return absl::OkStatus();
}

// A [hidden, vocab] matrix in ggml order, when present.
absl::Status CheckVocabMatrix(const GgufFile& file, std::string_view name,
                              const ModelConfig& config) {
  const GgufTensorInfo* t = file.FindTensor(name);
  if (t == nullptr) return absl::OkStatus();
  if (t->dims.size() != 2 || t->dims[0] != config.hidden_size || t->dims[1] != config.vocab_size) {
    std::string dims;
    for (int64_t d : t->dims) absl::StrAppend(&dims, dims.empty() ? "" : ", ", d);
    return ConfigError(name,
                       absl::StrCat("dims [", dims, "] are not [hidden_size ", config.hidden_size,
                                    ", vocab_size ", config.vocab_size, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string RopeScalingName(RopeScaling scaling) {
  switch (scaling) {
    case RopeScaling::kNone:
      return "none";
    case RopeScaling::kLinear:
      return "linear";
    case RopeScaling::kLlama3:
      return "llama3";
  }
  return "unknown";
}

absl::StatusOr<ModelConfig> ModelConfig::FromGguf(const GgufFile& file) {
  ModelConfig c;
  absl::StatusOr<std::string> arch = file.GetString("general.architecture");
  if (absl::IsNotFound(arch.status())) {
    return ConfigError("general.architecture", "required key is missing");
  }
  if (!arch.ok()) return ConfigError("general.architecture", arch.status().message());
  if (*arch != "llama" && *arch != "qwen2" && *arch != "qwen3" && *arch != "phi3" &&
      *arch != "gemma3") {
    return ConfigError("general.architecture",
                       absl::StrCat("'", absl::CHexEscape(*arch),
                                    "' is not supported; 'llama', 'qwen2', 'qwen3', 'phi3' and "
                                    "'gemma3' are"));
  }
  c.architecture = *arch;
  // llama.cpp's converter permutes only "llama" files' Q/K rows; the others keep HF's order.
  c.rope_rotate_half = c.architecture != "llama";
  c.qk_norm = c.architecture == "qwen3" || c.architecture == "gemma3";
  if (file.Find("tpserve.rope.rotate_half") != nullptr) {
    absl::StatusOr<bool> rotate_half = file.GetBool("tpserve.rope.rotate_half");
    if (!rotate_half.ok())
      return ConfigError("tpserve.rope.rotate_half", rotate_half.status().message());
    c.rope_rotate_half = *rotate_half;
  }
  const std::string p = c.architecture + ".";

  ASSIGN_OR_RETURN(c.num_layers, ReadSize(file, p + "block_count"));
  ASSIGN_OR_RETURN(c.hidden_size, ReadSize(file, p + "embedding_length"));
  ASSIGN_OR_RETURN(c.intermediate_size, ReadSize(file, p + "feed_forward_length"));
  ASSIGN_OR_RETURN(c.num_heads, ReadSize(file, p + "attention.head_count"));
  ASSIGN_OR_RETURN(c.num_kv_heads, ReadSize(file, p + "attention.head_count_kv", c.num_heads));
  ASSIGN_OR_RETURN(c.context_length, ReadSize(file, p + "context_length"));
  ASSIGN_OR_RETURN(c.rms_norm_eps, ReadPositiveFloat(file, p + "attention.layer_norm_rms_epsilon"));
  ASSIGN_OR_RETURN(c.rope_theta, ReadPositiveFloat(file, p + "rope.freq_base", 10000.0f));
  ASSIGN_OR_RETURN(c.sliding_window, ReadSlidingWindow(file, p + "attention.sliding_window"));
  c.declared_context_length = c.context_length;
  if (c.sliding_window > 0) c.context_length = std::min(c.context_length, c.sliding_window);

  // An explicit head size (Qwen3, Mistral Nemo: heads * head_dim != hidden), else hidden / heads.
  const std::string key_length = p + "attention.key_length";
  if (file.Find(key_length) != nullptr) {
    ASSIGN_OR_RETURN(c.head_dim, ReadSize(file, key_length));
  } else if (c.hidden_size % c.num_heads != 0) {
    return ConfigError(p + "attention.head_count",
                       absl::StrCat(c.num_heads, " does not divide embedding_length ",
                                    c.hidden_size, " and attention.key_length is absent"));
  } else {
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return ConfigError(p + "attention.head_count_kv",
                       absl::StrCat(c.num_kv_heads, " does not divide head_count ", c.num_heads));
  }
  const std::string value_length = p + "attention.value_length";
  ASSIGN_OR_RETURN(const int64_t value_dim, ReadSize(file, value_length, c.head_dim));
  if (value_dim != c.head_dim) {
    return ConfigError(value_length, absl::StrCat(value_dim, " differs from the key length ",
                                                  c.head_dim, ", which is not supported"));
  }
  ASSIGN_OR_RETURN(c.rope_dims, ReadSize(file, p + "rope.dimension_count", c.head_dim));
  if (c.rope_dims > c.head_dim || c.rope_dims % 2 != 0) {
    return ConfigError(p + "rope.dimension_count",
                       absl::StrCat(c.rope_dims, " is odd or exceeds head_dim ", c.head_dim));
  }
  RETURN_IF_ERROR(ReadRopeScaling(file, c.architecture, &c));
  if (c.architecture == "gemma3") RETURN_IF_ERROR(ReadGemma3(file, &c));
  RETURN_IF_ERROR(ReadBiases(file, &c));

  ASSIGN_OR_RETURN(c.vocab_size, ReadVocabSize(file, c.architecture));
  RETURN_IF_ERROR(CheckVocabMatrix(file, "token_embd.weight", c));
  RETURN_IF_ERROR(CheckVocabMatrix(file, "output.weight", c));
  c.tie_word_embeddings = file.FindTensor("output.weight") == nullptr;
  return c;
}

std::string ModelConfig::DebugString() const {
  std::string rope = RopeScalingName(rope_scaling);
  if (rope_scaling == RopeScaling::kLinear) absl::StrAppend(&rope, " x", rope_scaling_factor);
  return absl::StrFormat(
      "%s layers=%d hidden=%d ffn=%d heads=%d kv_heads=%d head_dim=%d vocab=%d "
      "rope_theta=%g rope_dims=%d rope_pairs=%s rope_scaling=%s rms_norm_eps=%g context=%d "
      "sliding_window=%d qkv_bias=%s qk_norm=%s tied_embeddings=%s",
      architecture, num_layers, hidden_size, intermediate_size, num_heads, num_kv_heads, head_dim,
      vocab_size, rope_theta, rope_dims, rope_rotate_half ? "rotate-half" : "adjacent", rope,
      rms_norm_eps, context_length, sliding_window, qkv_bias ? "true" : "false",
      qk_norm ? "true" : "false", tie_word_embeddings ? "true" : "false");
}

}  // namespace tpserve
