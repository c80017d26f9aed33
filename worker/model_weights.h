// The weights of one tensor-parallel rank. Linear weights are rows of output features:
// [out_features, in_features], so y = x · Wᵀ.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/packed_weight.h"
#include "model/ggml_type.h"
#include "model/model_config.h"
#include "model/shard_layout.h"

namespace tpserve {

// A linear weight [rows, cols] as this rank holds it: Q4_0, Q4_1 and Q8_0 rearranged into
// cpu::PackedWeight (same bytes, 16 rows side by side, read by cpu::PackedMatmulBT), fp32 for
// every other type and for slices that cut through blocks.
struct Linear {
  // kF32: `values` holds the weight; kF8E4M3 (a CUDA rank's FP8 checkpoint only): `fp8` and
  // `fp8_scales`; otherwise `packed`.
  GgmlType type = GgmlType::kF32;
  cpu::PackedWeight packed;
  std::vector<float> values;      // [rows, cols] when type == kF32
  std::vector<uint8_t> fp8;       // [rows, cols] E4M3 codes when type == kF8E4M3
  std::vector<float> fp8_scales;  // [rows]: row r's values are its codes' values times this
  // When not empty, the weight is these packed Linears stacked by rows, and `packed` and `values`
  // are empty; `type` is the first part's. Slices of different block types fused into one
  // product: Q4_K_M's Q4_K q/k rows with Q6_K v rows.
  std::vector<Linear> parts;
  // How a product with `packed` (or `parts`) rounds its activations.
  cpu::ActivationBits activation_bits = cpu::ActivationBits::k8;
  int64_t rows = 0;
  int64_t cols = 0;

  bool quantized() const { return type != GgmlType::kF32; }
  int64_t resident_bytes() const;
};

// A quantized Linear of `type` (one KeepsBlocks) from its GGUF blocks, rows × (cols / 32) of them
// (cols / 256 for the K-quants), row-major.
Linear PackedLinear(GgmlType type, const uint8_t* blocks, int64_t rows, int64_t cols);

// True when this build keeps `type` in blocks (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K).
bool KeepsBlocks(GgmlType type);

// y[m, w.rows] = x[m, w.cols] · wᵀ: quantized weights through the integer product at
// w.activation_bits (cpu::PackedMatmulBT), fp32 weights through cpu::MatmulBT.
void ApplyLinear(const Linear& w, const float* x, int64_t m, float* y);

// y[m, rows.size] = x[m, w.cols] · w[rows]ᵀ: the rows [rows.begin, rows.end()) of `w` only (the
// tied lm_head: this rank's vocabulary rows of the embedding).
void ApplyLinearRows(const Linear& w, Range rows, const float* x, int64_t m, float* y);

// out[i, :] = w[ids[i], :] decoded to fp32, for i in [0, n): the embedding lookup. Every id must
// lie in [0, w.rows) (TP_CHECK).
void LookupRows(const Linear& w, const int32_t* ids, int64_t n, float* out);

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  // q, k and v projections stacked by rows so one matmul computes all three:
  // [(q_heads + 2 * kv_heads) * head_dim, hidden], local heads only.
  Linear qkv;
  // The q, k and v biases of the local heads stacked like qkv's rows, [qkv.rows]; empty when the
  // model has none (Llama).
  std::vector<float> qkv_bias;
  // Qwen3's per-head RMSNorm weights of q and k, [head_dim] each (replicated); empty without.
  std::vector<float> q_norm, k_norm;
  Linear attn_output;           // [hidden, q_heads * head_dim] (row-parallel)
  std::vector<float> ffn_norm;  // [hidden]
  // Gemma 3: the attention and MLP outputs' norms before the residual, [hidden]; empty without.
  std::vector<float> post_attention_norm, post_ffw_norm;
  Linear gate_up;               // [2 * ffn_local, hidden]: gate rows, then up rows
  Linear down;                  // [hidden, ffn_local] (row-parallel)
  // [kv_heads local]: what an FP8 KV cache stores of this layer's K and V of each local KV head is
  // value / scale. 1 unless the checkpoint has calibrated scales (k_scale, v_scale).
  std::vector<float> k_cache_scales;
  std::vector<float> v_cache_scales;
};

struct ModelWeights {
  // [vocab, hidden], replicated on every rank, kept in its file format when KeepsBlocks (Q8_0 in
  // SmolLM2: 30 MiB instead of 108 MiB fp32); the lookup decodes only the rows it needs.
  Linear token_embedding;
  std::vector<float> output_norm;  // [hidden]
  // [vocab_local, hidden]; empty (rows == 0) when the embedding is tied: then this rank's
  // vocabulary rows of token_embedding serve, read in place, so no second copy exists.
  Linear lm_head;
  // [rope_dims / 2]: the angle per position of each rotated pair, the model's RoPE scaling
  // applied (model/rope_frequencies.h); replicated.
  std::vector<double> rope_inv_freq;
  // Gemma 3's local layers' (LocalRopeInverseFrequencies); empty without local layers.
  std::vector<double> rope_inv_freq_local;
  // The table layer `layer` of the whole model rotates with.
  const std::vector<double>& RopeTable(const ModelConfig& config, int64_t layer) const {
    return config.IsLocalLayer(layer) ? rope_inv_freq_local : rope_inv_freq;
  }
  std::vector<LayerWeights> layers;

  // Bytes of every weight as stored (blocks or fp32).
  int64_t resident_bytes() const;
  // Every linear: the embedding, the output head, each layer's four.
  std::vector<Linear*> linears();
};

}  // namespace tpserve
