// A step's tokens that run with a LoRA adapter, in groups of at most kMaxLoraGroupTokens tokens of
// the same slot (ForwardBatch::adapters): a group reads its adapter's matrices once for all its
// tokens, and the groups spread over threads (CPU) or thread blocks (CUDA). A plain struct of
// int32 so that the CUDA pass uploads the list as it is.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/lora_product.h"
#include "worker/forward_batch.h"
#include "worker/lora_shard.h"

namespace tpserve {

inline constexpr int kMaxLoraGroupTokens = static_cast<int>(cpu::kMaxLoraProductTokens);

struct LoraTokenGroup {
  int32_t slot = 0;   // 1 and up
  int32_t count = 0;  // tokens[0, count) are used
  int32_t tokens[kMaxLoraGroupTokens] = {};
};

// Each slot's tokens in batch order, in groups that are full but for the slot's last. Sequences of
// slot 0 (the base model) are in no group.
std::vector<LoraTokenGroup> GroupLoraTokens(const ForwardBatch& batch);

// A step's groups and each group's adapter, looked up once per slot so that all the groups of a
// slot run the same one, and kept alive for the step whatever the table does meanwhile.
struct StepLoras {
  std::vector<LoraTokenGroup> groups;
  std::vector<std::shared_ptr<const LoraShard>> shards;  // per group
};
// INVALID_ARGUMENT for a slot that holds no adapter (or any slot without a table).
absl::StatusOr<StepLoras> TakeStepLoras(const ForwardBatch& batch, const LoraTable* table);

}  // namespace tpserve
