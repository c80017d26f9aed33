#include "coordinator/lora_modules.h"

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::StatusOr<std::vector<LoraModule>> ParseLoraModules(const std::vector<std::string>& specs,
                                                         const std::string& served_name,
                                                         int32_t max_loras) {
  std::vector<LoraModule> modules;
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--lora-modules ", spec, ": expected name=path"));
    }
    const int32_t slot = static_cast<int32_t>(modules.size()) + 1;
    LoraModule module{spec.substr(0, eq), spec.substr(eq + 1), slot, slot};
    if (LoraNamed(modules, served_name, module.name).has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--lora-modules ", spec, ": the name ", module.name, " is taken (",
          module.name == served_name ? "the served model's" : "another adapter's", ")"));
    }
    modules.push_back(std::move(module));
  }
  if (max_loras > 0 && static_cast<int32_t>(modules.size()) > max_loras) {
    return absl::InvalidArgumentError(absl::StrCat("--lora-modules names ", modules.size(),
                                                   " adapters; --max-loras allows ", max_loras));
  }
  return modules;
}

std::optional<LoraModule> LoraNamed(const std::vector<LoraModule>& modules,
                                    const std::string& served_name, const std::string& name) {
  if (name == served_name) return LoraModule();
  for (const LoraModule& m : modules) {
    if (m.name == name) return m;
  }
  return std::nullopt;
}

}  // namespace tpserve
