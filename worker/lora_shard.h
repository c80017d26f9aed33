// A LoRA adapter (model/lora_adapter.h) as one tensor-parallel rank of one pipeline stage holds
// it, sliced like the base weights it changes: the column-parallel projections (q, k, v by heads;
// gate, up by FFN columns) keep B's rows of this rank's outputs and all of A; the row-parallel
// ones (o, down) keep A's columns of this rank's inputs and all of B, so each rank adds its part
// of B · A · x before the layer's all-reduce sums them.
//
// LoraTable holds the adapters a worker serves, by slot (1 and up; 0 is the base model):
// thread-safe, and a step keeps the shards it read alive however the table changes meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cpu/lora_product.h"
#include "model/lora_adapter.h"
#include "model/model_config.h"
#include "model/shard_layout.h"

namespace tpserve {

// One module's slice: out[t, offset + j] += Σ_k bt[k, j] · Σ_i a[k, i] · x[t, i].
struct LoraSlice {
  LoraTarget target = LoraTarget::kQ;
  int64_t rank = 0;
  int64_t in = 0;         // columns of A: the slice of the module's input this rank holds
  int64_t out = 0;        // columns of Bᵀ
  int64_t offset = 0;     // where the module's rows start in the fused output row (qkv, gate_up)
  std::vector<float> a;   // [rank, in]
  std::vector<float> bt;  // [rank, out]: B transposed, so that each rank adds a contiguous row
};

struct LoraLayerShard {
  std::vector<LoraSlice> qkv;      // into the fused [q | k | v] row
  std::vector<LoraSlice> o;        // into the attention output (before the all-reduce)
  std::vector<LoraSlice> gate_up;  // into the fused [gate | up] row
  std::vector<LoraSlice> down;     // into the MLP output (before the all-reduce)
};

struct LoraShard {
  std::vector<LoraLayerShard> layers;  // the stage's layers, from 0
  int64_t bytes = 0;
};

LoraShard ShardLora(const LoraAdapter& adapter, const ModelConfig& config,
                    const ShardLayout& layout);

// The largest rank ApplyLora takes, and the most slots a table has (--max-lora-rank's and
// --max-loras' bounds).
inline constexpr int64_t kMaxLoraRank = cpu::kMaxLoraProductRank;
inline constexpr int32_t kMaxLoraSlots = 256;

// Adds `slice`'s product for a few tokens (at most cpu::kMaxLoraProductTokens) of its adapter:
// x[t] is token t's input row (the slice's input from column 0), y[t] its output row.
void ApplyLora(const LoraSlice& slice, const float* const* x, float* const* y, int64_t tokens);

class LoraTable {
 public:
  explicit LoraTable(int32_t num_slots) : slots_(num_slots + 1) {}

  int32_t num_slots() const { return static_cast<int32_t>(slots_.size()) - 1; }
  void Set(int32_t slot, std::shared_ptr<const LoraShard> shard);
  // Null for slot 0, an empty slot or one out of range.
  std::shared_ptr<const LoraShard> Get(int32_t slot) const;

 private:
  mutable absl::Mutex mutex_;
  std::vector<std::shared_ptr<const LoraShard>> slots_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace tpserve
