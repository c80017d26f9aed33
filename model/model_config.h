// Hyperparameters of a Llama-family model (GGUF architectures "llama", "qwen2", "qwen3", "phi3"
// and "gemma3"), read from GGUF metadata.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/gguf_file.h"

namespace tpserve {

// The MLP's gate: Llama's SiLU, or Gemma's GELU with the tanh approximation
// (0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))).
enum class FfnActivation { kSilu, kGeluTanh };

// How the rotary frequencies are stretched beyond the trained context.
enum class RopeScaling {
  kNone,
  // Every angle divided by rope_scaling_factor (positions / factor): `<arch>.rope.scaling.type`
  // "linear" with `<arch>.rope.scaling.factor` (or the older `<arch>.rope.scale_linear`).
  kLinear,
  // Llama-3.1's "llama3" rule: pair i's frequency divided by its own factor, which llama.cpp's
  // converter computes from the HF rope_scaling (factor, low/high_freq_factor, original context)
  // and stores as the tensor rope_freqs.weight [rope_dims / 2].
  kLlama3,
};

struct ModelConfig {
  std::string architecture;       // general.architecture: "llama", "qwen2", …, "gemma3"; keys
                                  // read under that prefix (`<arch>.block_count`, …)
  int64_t vocab_size = 0;         // rows of token_embd.weight
  int64_t hidden_size = 0;        // <arch>.embedding_length
  int64_t intermediate_size = 0;  // <arch>.feed_forward_length
  int64_t num_layers = 0;         // <arch>.block_count
  int64_t num_heads = 0;          // <arch>.attention.head_count (query heads)
  int64_t num_kv_heads = 0;       // <arch>.attention.head_count_kv; num_heads divides evenly
  int64_t head_dim = 0;           // <arch>.attention.key_length, else hidden_size / num_heads
  float rope_theta = 10000.0f;    // <arch>.rope.freq_base
  int64_t rope_dims = 0;          // <arch>.rope.dimension_count: leading dims of a head rotated
  // Which dims of a head RoPE pairs: llama.cpp's converter permutes the Q/K rows of "llama"
  // files so that pairs are adjacent (2i, 2i + 1); "qwen2" files keep the HF order, where pair i
  // is (i, i + rope_dims / 2) (rotate-half). `tpserve.rope.rotate_half` (bool) overrides: a
  // Hugging Face folder's view (model/hf_folder.h) sets it, its rows being in HF order.
  bool rope_rotate_half = false;
  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_scaling_factor = 1.0f;  // kLinear: angles are divided by it
  float rms_norm_eps = 1e-5f;        // <arch>.attention.layer_norm_rms_epsilon
  // Positions served: <arch>.context_length, or the sliding window when one smaller than that is
  // declared (see sliding_window).
  int64_t context_length = 0;
  // <arch>.attention.sliding_window (Mistral-7B-v0.1: 4096 of 32768), 0 when absent or 0. A
  // context no longer than the window attends exactly as sliding-window attention does (no key
  // is ever outside any query's window), so a device whose attention kernels take no window (CUDA)
  // serves such a model with context_length clamped to the window; the CPU's attention applies
  // the window (AttentionWindow) and serves the whole context (ServeWholeContext).
  int64_t sliding_window = 0;
  int64_t declared_context_length = 0;  // <arch>.context_length, before any clamp
  bool qkv_bias = false;             // blk.N.attn_{q,k,v}.bias present (Qwen2): added after the
                                     // projections
  bool tie_word_embeddings = false;  // true when output.weight is absent: logits use token_embd
  // Qwen3: each head's q and k RMS-normalized (blk.N.attn_{q,k}_norm.weight [head_dim], the
  // model's rms_norm_eps) after the projection, before RoPE.
  bool qk_norm = false;
  // Gemma 3 (the text model): the embedding scaled by sqrt(hidden_size); each block's attention
  // and MLP outputs RMS-normalized before they join the residual (blk.N.post_attention_norm,
  // post_ffw_norm); GELU (tanh approximation) gating; every `local_layer_period`-th layer global,
  // the others local: local layers rotate with `rope_theta_local` and no scaling, global ones with
  // rope_theta and rope_scaling. Both kinds attend within the sliding window, which the served
  // context never exceeds (see sliding_window).
  FfnActivation ffn_activation = FfnActivation::kSilu;
  float embedding_scale = 1.0f;
  bool block_output_norms = false;
  int64_t local_layer_period = 0;  // 0: every layer global
  float rope_theta_local = 10000.0f;
  // Gemma 3's query_pre_attn_scalar^-0.5 (tpserve.attention.query_pre_attn_scalar from a Hugging
  // Face folder; in a GGUF file, as llama.cpp infers it: hidden / heads for the 62-layer 27B,
  // head_dim otherwise); 0 for the usual 1 / sqrt(head_dim).
  float attention_scale = 0.0f;
  // Added to every RMSNorm weight at load: 1 for a Gemma Hugging Face folder, whose norms multiply
  // by 1 + w (llama.cpp's converter stores 1 + w; tpserve.norm.weight_offset).
  float norm_weight_offset = 0.0f;

  // The window layer `layer` (of the whole model) attends within: sliding_window on every layer,
  // or on Gemma 3's local ones only; 0 for the whole causal context.
  int64_t AttentionWindow(int64_t layer) const {
    if (sliding_window == 0 || (local_layer_period > 0 && !IsLocalLayer(layer))) return 0;
    return sliding_window;
  }
  // For a forward pass that applies AttentionWindow itself: the model's own context, no longer
  // clamped to the window.
  void ServeWholeContext() { context_length = declared_context_length; }

  // What attention multiplies q · k by.
  float AttentionScale() const {
    return attention_scale > 0 ? attention_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }

  // Whether layer `layer` (of the whole model) is local: Gemma 3's sliding-window layers.
  bool IsLocalLayer(int64_t layer) const {
    return local_layer_period > 0 && (layer + 1) % local_layer_period != 0;
  }

  // Reads and validates the config. INVALID_ARGUMENT naming the key for a missing required key,
  // a key of the wrong type, a non-positive value, or an inconsistency (hidden_size not divisible
  // by num_heads without attention.key_length, value_length not key_length, num_heads by
  // num_kv_heads, rope_dims odd or larger than head_dim, token_embd
  // shape disagreeing with hidden_size/vocab_size); naming the type for a RoPE scaling other than
  // none, linear and llama3 (yarn, longrope, …); naming the tensor for a bias tensor this forward
  // pass has no place for (attn_output, ffn_*, output biases). Required: general.architecture and
  // <arch>.{block_count, embedding_length, feed_forward_length, attention.head_count,
  // attention.layer_norm_rms_epsilon, context_length}. Defaults: head_count_kv = head_count,
  // rope.freq_base = 10000, rope.dimension_count = head_dim, vocab_size = length of
  // tokenizer.ggml.tokens, else token_embd.weight rows.
  static absl::StatusOr<ModelConfig> FromGguf(const GgufFile& file);

  // One line, e.g. "llama layers=30 hidden=576 ffn=1536 heads=9 kv_heads=3 head_dim=64 ...".
  std::string DebugString() const;
};

// "none", "linear" or "llama3".
std::string RopeScalingName(RopeScaling scaling);

}  // namespace tpserve
