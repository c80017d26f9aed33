// The Llama forward pass of one tensor-parallel rank on the CPU: fp32 activations; linear weights
// in GGUF blocks or fp32 (see Linear in model_weights.h).
//
// Per layer: RMSNorm → fused QKV (column-parallel by heads) → + QKV bias (Qwen2) → each head's q
// and k RMSNorm (Qwen3) → RoPE (adjacent pairs for GGUF "llama", rotate-half for the Qwen files;
// frequencies as the model's RoPE
// scaling makes them) → KV write into the paged pool → paged causal GQA attention → o_proj
// (row-parallel) → all-reduce → residual; RMSNorm → gate/up (column-parallel) → SiLU·mul → down
// (row-parallel) → all-reduce → residual. A sequence with a LoRA adapter adds its low-rank
// products to the four projections' outputs, before the all-reduces (worker/lora_shard.h). The
// final norm and the vocab-parallel lm_head run only
// for the tokens whose logits are wanted, and the logits are gathered on rank 0. A pipeline stage
// runs its own layers: it takes the previous stage's residual stream instead of the embedding, and
// all but the last hand theirs to the next stage instead of computing logits.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "model/model_config.h"
#include "model/shard_layout.h"
#include "worker/comm/communicator.h"
#include "worker/comm/pipeline_links.h"
#include "worker/forward_batch.h"
#include "worker/forward_pass.h"
#include "worker/kv_cache.h"
#include "worker/lora_token_groups.h"
#include "worker/model_weights.h"

namespace tpserve {

class CpuForwardPass : public ForwardPass {
 public:
  // `comm` (the stage's tensor-parallel group) and `links` (null for one stage) must outlive the
  // model. The pool's shape must match the layout: one layer per layer of the stage.
  CpuForwardPass(const ModelConfig& config, const ShardLayout& layout, ModelWeights weights,
                 Communicator* comm, PipelineLinks* links, const KvCacheShape& kv_shape);

  absl::Status Forward(const ForwardBatch& batch, std::vector<float>* logits) override;
  const KvCacheShape& kv_shape() const override { return kv_cache_.shape(); }
  int64_t weight_bytes() const override { return weights_.resident_bytes(); }
  std::string device_name() const override { return "cpu"; }

  // Called in every layer with the K (rotated) and V about to be written to the pool, each
  // [num_tokens, local KV heads, head_dim]: what KV-cache calibration (worker/kv_calibration.h)
  // measures. None by default.
  using KvObserver =
      std::function<void(int layer, const float* k, const float* v, int64_t num_tokens)>;
  void set_kv_observer(KvObserver observer) { kv_observer_ = std::move(observer); }

 private:
  void Attention(int layer, const ForwardBatch& batch, const float* normed, float* out);
  void Mlp(int layer, const float* normed, int64_t num_tokens, float* out);
  // y += the slices of `which` in `layer` of each token's adapter, for the tokens that have one.
  void AddLora(int layer, std::vector<LoraSlice> LoraLayerShard::*which, const float* x,
               int64_t x_stride, float* y, int64_t y_stride) const;
  absl::Status Logits(const ForwardBatch& batch, const float* hidden, std::vector<float>* logits);

  const ModelConfig config_;
  const ShardLayout layout_;
  const ModelWeights weights_;
  Communicator* const comm_;
  PipelineLinks* const links_;
  KvCache kv_cache_;
  KvObserver kv_observer_;
  StepLoras loras_step_;  // this step's tokens that run with an adapter
  // A step's activations, kept between steps at the largest size seen.
  struct Buffers {
    std::vector<float> residual, normed, partial, qkv, q, k, v, attn, gate_up, act, selected, local,
        gathered;
  };
  Buffers buffers_;
};

}  // namespace tpserve
