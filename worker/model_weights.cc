#include "worker/model_weights.h"

namespace tpserve {

int64_t ModelWeights::resident_bytes() const {
  int64_t floats = token_embedding.size() + output_norm.size() + lm_head.size();
  for (const LayerWeights& layer : layers) {
    floats += layer.attn_norm.size() + layer.qkv.size() + layer.attn_output.size() +
              layer.ffn_norm.size() + layer.gate_up.size() + layer.down.size();
  }
  return floats * static_cast<int64_t>(sizeof(float));
}

}  // namespace tpserve
