// LoRA adapters on a CUDA worker: device copies of the LoraTable's shards (worker/lora_shard.h)
// in a pool of --max-loras slots sized at load for --max-lora-rank, so that the KV pool takes what
// is left and a step allocates nothing; and the step's products (kernels/cuda/lora_product.h), one
// launch per module for every adapter in the step.
//
// A slot's shard is uploaded (bf16) the first time a step uses it after the table changed, on the
// compute stream ahead of the step's kernels; a steady mix of adapters uploads nothing. Steps with
// adapters run eagerly: the decode graphs hold base-model steps only.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/device_buffer.h"
#include "model/lora_adapter.h"
#include "model/model_config.h"
#include "model/shard_layout.h"
#include "worker/lora_token_groups.h"

namespace tpserve::cuda {

class CudaLoraPool {
 public:
  // `slots` adapters of rank up to `max_rank` on every target of the stage's layers, for steps of
  // up to `max_tokens` tokens, on the current device. RESOURCE_EXHAUSTED when it does not fit.
  static absl::StatusOr<std::unique_ptr<CudaLoraPool>> Create(const ModelConfig& config,
                                                              const ShardLayout& layout,
                                                              int32_t slots, int64_t max_rank,
                                                              int64_t max_tokens);

  int64_t bytes() const;

  // Makes `step`'s adapters resident (uploading those new to their slot) and its groups the ones
  // Apply runs, enqueued on `stream`. INVALID_ARGUMENT for a shard this pool cannot hold.
  absl::Status Prepare(const StepLoras& step, cudaStream_t stream);

  // y[t, module's columns] += each target's product for the prepared step's tokens, enqueued.
  // x and y are the targets' common input and output rows (y the fused row of qkv or gate_up).
  void Apply(int layer, std::initializer_list<LoraTarget> targets, const bf16* x, int64_t x_stride,
             bf16* y, int64_t y_stride, cudaStream_t stream);

 private:
  // Where a target's matrices lie within a layer's part of a slot, and its shape.
  struct Module {
    int64_t in = 0, out = 0, offset = 0;  // offset: the first column in the output row
    int64_t a = 0, bt = 0;                // element offsets of A and Bᵀ
  };

  CudaLoraPool(const ModelConfig& config, const ShardLayout& layout, int32_t slots,
               int64_t max_rank);
  absl::Status Upload(int32_t slot, const LoraShard& shard, cudaStream_t stream);

  const int64_t num_layers_;
  const int64_t max_rank_;
  std::array<Module, kNumLoraTargets> modules_;
  int64_t layer_stride_ = 0;  // elements of one layer's matrices in a slot
  int64_t slot_stride_ = 0;   // elements of one slot
  std::vector<std::shared_ptr<const LoraShard>> resident_;  // [slots]: what the device holds
  DeviceBuffer<bf16> pool_;                                 // [slots, layers, targets' A and Bᵀ]
  DeviceBuffer<int32_t> ranks_;                             // [slots, layers, targets]
  DeviceBuffer<int32_t> groups_;                            // this step's LoraTokenGroups
  DeviceBuffer<float> scratch_;                             // [groups, tokens, max_rank]
  int64_t num_groups_ = 0;
  std::vector<bf16> staging_;  // a slot, converted on the host
};

}  // namespace tpserve::cuda
