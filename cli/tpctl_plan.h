// `tpctl plan`: the capacity plan (cli/capacity_plan.h) for a GGUF file or a Hugging Face folder
// (its config.json is enough), printed as text or JSON. Needs no running cluster.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "cli/capacity_plan.h"

namespace tpserve {

struct PlanFlags {
  std::string model;
  std::string gpu = "h100";  // a preset for the memory and bandwidth flags left unset
  std::string weights = "bf16";
  std::string kv_cache_dtype = "bf16";
  int64_t context = 8192;
  PlanHardware hardware;
};

// Adds the subcommand and its flags to `app`.
CLI::App* AddPlanCommand(CLI::App& app, PlanFlags* flags);
// Prints the plan (JSON with `json`); the exit status.
int RunPlan(const CLI::App& command, const PlanFlags& flags, bool json);

}  // namespace tpserve
