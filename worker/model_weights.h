// The fp32 weights of one tensor-parallel rank. Linear weights are rows of output features:
// [out_features, in_features], so y = x · Wᵀ.
#pragma once

#include <cstdint>
#include <vector>

namespace tpserve {

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  // q, k and v projections stacked by rows so one GEMM computes all three:
  // [(q_heads + 2 * kv_heads) * head_dim, hidden], local heads only.
  std::vector<float> qkv;
  std::vector<float> attn_output;  // [hidden, q_heads * head_dim] (row-parallel)
  std::vector<float> ffn_norm;     // [hidden]
  std::vector<float> gate_up;      // [2 * ffn_local, hidden]: gate rows, then up rows
  std::vector<float> down;         // [hidden, ffn_local] (row-parallel)
};

struct ModelWeights {
  std::vector<float> token_embedding;  // [vocab, hidden], replicated
  std::vector<float> output_norm;      // [hidden]
  // [vocab_local, hidden]; empty when the embedding is tied, then rows of token_embedding serve.
  std::vector<float> lm_head;
  std::vector<LayerWeights> layers;

  int64_t resident_bytes() const;
};

}  // namespace tpserve
