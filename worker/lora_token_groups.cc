#include "worker/lora_token_groups.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {

std::vector<LoraTokenGroup> GroupLoraTokens(const ForwardBatch& batch) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  struct Open {
    int32_t slot;
    size_t group;  // the slot's last group, the only one with room
  };
  std::vector<LoraTokenGroup> groups;
  std::vector<Open> open;  // few slots per step
  for (size_t s = 0; s < batch.adapters.size(); ++s) {
    const int32_t slot = batch.adapters[s];
    if (slot == 0) continue;
    auto it =
        std::find_if(open.begin(), open.end(), [slot](const Open& o) { return o.slot == slot; });
    if (it == open.end()) it = open.insert(open.end(), Open{slot, kNone});
    for (int32_t t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) {
      if (it->group == kNone || groups[it->group].count == kMaxLoraGroupTokens) {
        it->group = groups.size();
        groups.push_back(LoraTokenGroup{slot, 0, {}});
      }
      LoraTokenGroup& group = groups[it->group];
      group.tokens[group.count++] = t;
    }
  }
  return groups;
}

absl::StatusOr<StepLoras> TakeStepLoras(const ForwardBatch& batch, const LoraTable* table) {
  StepLoras step;
  step.groups = GroupLoraTokens(batch);
  for (size_t g = 0; g < step.groups.size(); ++g) {
    const int32_t slot = step.groups[g].slot;
    size_t seen = 0;
    while (seen < g && step.groups[seen].slot != slot) ++seen;
    std::shared_ptr<const LoraShard> shard =
        seen < g ? step.shards[seen] : (table != nullptr ? table->Get(slot) : nullptr);
    if (shard == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("LoRA slot ", slot, " holds no adapter"));
    }
    step.shards.push_back(std::move(shard));
  }
  return step;
}

}  // namespace tpserve
