// Hyperparameters of a llama-architecture model, read from GGUF metadata.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/gguf_file.h"

namespace tpserve {

struct ModelConfig {
  std::string architecture;          // general.architecture; only "llama" is supported
  int64_t vocab_size = 0;            // rows of token_embd.weight
  int64_t hidden_size = 0;           // llama.embedding_length
  int64_t intermediate_size = 0;     // llama.feed_forward_length
  int64_t num_layers = 0;            // llama.block_count
  int64_t num_heads = 0;             // llama.attention.head_count (query heads)
  int64_t num_kv_heads = 0;          // llama.attention.head_count_kv; num_heads divides evenly
  int64_t head_dim = 0;              // hidden_size / num_heads
  float rope_theta = 10000.0f;       // llama.rope.freq_base
  int64_t rope_dims = 0;             // llama.rope.dimension_count: leading dims of a head rotated
  float rms_norm_eps = 1e-5f;        // llama.attention.layer_norm_rms_epsilon
  int64_t context_length = 0;        // llama.context_length: positions the model was trained on
  bool tie_word_embeddings = false;  // true when output.weight is absent: logits use token_embd

  // Reads and validates the config. INVALID_ARGUMENT naming the key for a missing required key,
  // a key of the wrong type, a non-positive value, or an inconsistency (hidden_size not divisible
  // by num_heads, num_heads by num_kv_heads, rope_dims odd or larger than head_dim, token_embd
  // shape disagreeing with hidden_size/vocab_size). Required: general.architecture and
  // llama.{block_count, embedding_length, feed_forward_length, attention.head_count,
  // attention.layer_norm_rms_epsilon, context_length}. Defaults: head_count_kv = head_count,
  // rope.freq_base = 10000, rope.dimension_count = head_dim, vocab_size = length of
  // tokenizer.ggml.tokens, else token_embd.weight rows.
  static absl::StatusOr<ModelConfig> FromGguf(const GgufFile& file);

  // One line, e.g. "llama layers=30 hidden=576 ffn=1536 heads=9 kv_heads=3 head_dim=64 ...".
  std::string DebugString() const;
};

}  // namespace tpserve
