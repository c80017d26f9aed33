// What the coordinator's flags and the model make of the cluster: the workers' Init, the HTTP
// front end's limits and, once the shards are loaded, the engine's options. Pure functions of
// their inputs, so that each flag's effect is unit-tested (serving_plan_test) apart from the
// process that serves.
#pragma once

#include "absl/status/statusor.h"
#include "coordinator/coordinator_flags.h"
#include "coordinator/engine.h"
#include "coordinator/http_message.h"
#include "coordinator/lora_modules.h"
#include "coordinator/worker_pool.h"
#include "model/model_config.h"

namespace tpserve {

struct ServingPlan {
  // group_id and coordinator_address are the caller's: they name this incarnation and address.
  WorkerInitOptions init;
  HttpLimits http;
  // --speculative self: the draft's layers (--self-spec-layers, default a quarter of the
  // model's); 0 otherwise.
  int32_t self_spec_layers = 0;
  std::vector<LoraModule> loras;  // --lora-modules, in their slots
};

// INVALID_ARGUMENT naming the flag when the flags cannot serve this model: --speculative draft
// without --draft-model, a self-speculative draft of as many layers as the model, LoRA adapters
// on CUDA workers or under bad names. `served_name` is what "model" names the base model by.
absl::StatusOr<ServingPlan> MakeServingPlan(const CoordinatorFlags& flags,
                                            const ModelConfig& config,
                                            const std::string& served_name = "");

// The engine's options once the ranks have loaded `loaded`. The context is what the model
// supports (`model_context`, when given), cut to what the KV pool holds.
EngineOptions MakeEngineOptions(const CoordinatorFlags& flags, const ModelConfig& config,
                                const LoadedModel& loaded, int64_t* model_context = nullptr);

}  // namespace tpserve
