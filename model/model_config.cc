#include "model/model_config.h"

#include <cmath>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
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

// Vocabulary size: llama.vocab_size, else the token list's length, else token_embd rows.
absl::StatusOr<int64_t> ReadVocabSize(const GgufFile& file) {
  if (file.Find("llama.vocab_size") != nullptr) return ReadSize(file, "llama.vocab_size");
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
  return ConfigError("llama.vocab_size",
                     "missing, and neither tokenizer.ggml.tokens nor token_embd.weight is present");
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

absl::StatusOr<ModelConfig> ModelConfig::FromGguf(const GgufFile& file) {
  ModelConfig c;
  absl::StatusOr<std::string> arch = file.GetString("general.architecture");
  if (absl::IsNotFound(arch.status())) {
    return ConfigError("general.architecture", "required key is missing");
  }
  if (!arch.ok()) return ConfigError("general.architecture", arch.status().message());
  if (*arch != "llama") {
    return ConfigError("general.architecture", absl::StrCat("'", absl::CHexEscape(*arch),
                                                            "' is not supported; only 'llama' is"));
  }
  c.architecture = *arch;

  ASSIGN_OR_RETURN(c.num_layers, ReadSize(file, "llama.block_count"));
  ASSIGN_OR_RETURN(c.hidden_size, ReadSize(file, "llama.embedding_length"));
  ASSIGN_OR_RETURN(c.intermediate_size, ReadSize(file, "llama.feed_forward_length"));
  ASSIGN_OR_RETURN(c.num_heads, ReadSize(file, "llama.attention.head_count"));
  ASSIGN_OR_RETURN(c.num_kv_heads, ReadSize(file, "llama.attention.head_count_kv", c.num_heads));
  ASSIGN_OR_RETURN(c.context_length, ReadSize(file, "llama.context_length"));
  ASSIGN_OR_RETURN(c.rms_norm_eps,
                   ReadPositiveFloat(file, "llama.attention.layer_norm_rms_epsilon"));
  ASSIGN_OR_RETURN(c.rope_theta, ReadPositiveFloat(file, "llama.rope.freq_base", 10000.0f));

  if (c.hidden_size % c.num_heads != 0) {
    return ConfigError(
        "llama.attention.head_count",
        absl::StrCat(c.num_heads, " does not divide embedding_length ", c.hidden_size));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return ConfigError("llama.attention.head_count_kv",
                       absl::StrCat(c.num_kv_heads, " does not divide head_count ", c.num_heads));
  }
  c.head_dim = c.hidden_size / c.num_heads;
  for (std::string_view key : {"llama.attention.key_length", "llama.attention.value_length"}) {
    ASSIGN_OR_RETURN(const int64_t length, ReadSize(file, key, c.head_dim));
    if (length != c.head_dim) {
      return ConfigError(key, absl::StrCat(length, " differs from embedding_length / head_count = ",
                                           c.head_dim, ", which is not supported"));
    }
  }
  ASSIGN_OR_RETURN(c.rope_dims, ReadSize(file, "llama.rope.dimension_count", c.head_dim));
  if (c.rope_dims > c.head_dim || c.rope_dims % 2 != 0) {
    return ConfigError("llama.rope.dimension_count",
                       absl::StrCat(c.rope_dims, " is odd or exceeds head_dim ", c.head_dim));
  }

  ASSIGN_OR_RETURN(c.vocab_size, ReadVocabSize(file));
  RETURN_IF_ERROR(CheckVocabMatrix(file, "token_embd.weight", c));
  RETURN_IF_ERROR(CheckVocabMatrix(file, "output.weight", c));
  c.tie_word_embeddings = file.FindTensor("output.weight") == nullptr;
  return c;
}

std::string ModelConfig::DebugString() const {
  return absl::StrFormat(
      "%s layers=%d hidden=%d ffn=%d heads=%d kv_heads=%d head_dim=%d vocab=%d "
      "rope_theta=%g rope_dims=%d rms_norm_eps=%g context=%d tied_embeddings=%s",
      architecture, num_layers, hidden_size, intermediate_size, num_heads, num_kv_heads, head_dim,
      vocab_size, rope_theta, rope_dims, rms_norm_eps, context_length,
      tie_word_embeddings ? "true" : "false");
}

}  // namespace tpserve
