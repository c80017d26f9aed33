// --lora-modules name=path: the LoRA adapters a cluster serves beside its base model. Requests
// pick one by its name in "model" (the base model keeps the served name); each is a slot of the
// workers' adapter table (InitRequest.lora_adapters), 1 and up, in flag order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve {

struct LoraModule {
  std::string name;
  std::string path;  // a PEFT folder, the same path on every worker
  int32_t slot = 0;
  // Which loading of the slot this is: a request parsed for one generation never runs with a
  // later one (AdapterGate).
  int64_t generation = 0;
};

// INVALID_ARGUMENT naming the flag for a spec that is not name=path, a name used twice or equal
// to `served_name`, or more adapters than `max_loras` (when positive).
absl::StatusOr<std::vector<LoraModule>> ParseLoraModules(const std::vector<std::string>& specs,
                                                         const std::string& served_name,
                                                         int32_t max_loras);

// The adapter `name` names; for `served_name`, the base model (slot 0); nullopt for neither.
std::optional<LoraModule> LoraNamed(const std::vector<LoraModule>& modules,
                                    const std::string& served_name, const std::string& name);

}  // namespace tpserve
