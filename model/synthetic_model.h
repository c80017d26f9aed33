// Random-weight Llama-family models of any shape, written as GGUF files, so that tensor-parallel
// sizes and shapes that no bundled model has (8 heads at T=8, Llama-3-8B dimensions, Qwen2's
// biases, Qwen3's q/k norms and head size, Llama-3.1's RoPE scaling, Mistral's GQA and window)
// can be tested.
// The vocabulary is byte-level: three special tokens, the 256 bytes, then filler tokens.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "model/ggml_type.h"

namespace tpserve {

struct SyntheticModelSpec {
  int64_t layers = 2;
  int64_t hidden = 256;
  int64_t heads = 8;
  int64_t kv_heads = 4;
  int64_t ffn = 512;
  // 0: hidden / heads. Otherwise each head's size, written as attention.key_length and
  // value_length (Qwen3, Mistral Nemo: heads * head_dim != hidden).
  int64_t head_dim = 0;
  int64_t vocab = 512;  // at least 259: 3 specials + 256 bytes
  // A GGUF file whose tokenizer.* keys (vocabulary, merges or scores, special ids, chat template)
  // replace the byte-level vocabulary, `vocab` then being its size: a real family's tokenizer
  // (llama.cpp's vocab-only files) on random weights. Empty for the byte-level one.
  std::string vocab_from;
  int64_t context_length = 4096;
  double rope_theta = 10000.0;
  // "llama", "qwen2", "qwen3", "phi3" or "gemma3": the metadata's key prefix; qwen2 also gets
  // q/k/v biases, qwen3 per-head q and k norm weights, phi3 fused attn_qkv and [gate | up] ffn_up
  // matrices, gemma3 q/k norms and the block outputs' norms.
  std::string architecture = "llama";
  bool tied_embeddings = false;  // no output.weight: the logits reuse token_embd
  // "none", "linear" (<arch>.rope.scaling.{type, factor}) or "llama3" (rope_freqs.weight computed
  // from the four numbers below as llama.cpp's converter does from an HF rope_scaling).
  std::string rope_scaling = "none";
  double rope_scaling_factor = 8.0;
  double rope_low_freq_factor = 1.0;     // llama3
  double rope_high_freq_factor = 4.0;    // llama3
  int64_t rope_original_context = 8192;  // llama3
  int64_t sliding_window = 0;            // <arch>.attention.sliding_window when positive (Mistral)
  // The matrices' type: kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_K, kQ5_K or kQ6_K (quantized by
  // rounding to the nearest code, not llama.cpp's searched scales).
  GgmlType dtype = GgmlType::kF32;
  // With kQ4_K or kQ5_K: Q6_K for output.weight and for attn_v and ffn_down of even layers, as
  // llama.cpp's Q4_K_M and Q5_K_M give some of them more bits.
  bool k_quant_mix = false;
  uint64_t seed = 1;
};

// Each head's size: spec.head_dim, else hidden / heads.
int64_t SyntheticHeadDim(const SyntheticModelSpec& spec);

// INVALID_ARGUMENT naming the field for an impossible shape (heads not dividing hidden, …).
absl::Status ValidateSyntheticModelSpec(const SyntheticModelSpec& spec);

// Writes the model to `path`. Weights are N(0, 1/fan_in) so activations keep their scale through
// the layers; norm weights are near 1.
absl::Status WriteSyntheticModel(const SyntheticModelSpec& spec, const std::string& path);

}  // namespace tpserve
