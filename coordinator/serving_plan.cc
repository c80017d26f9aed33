#include "coordinator/serving_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/shard_layout.h"

namespace tpserve {

absl::StatusOr<ServingPlan> MakeServingPlan(const CoordinatorFlags& flags,
                                            const ModelConfig& config,
                                            const std::string& served_name) {
  ServingPlan plan;
  const int stages = flags.pipeline_parallel_size;
  if (stages < 1 || flags.world_size % stages != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pipeline-parallel-size ", stages, " does not divide --world-size ", flags.world_size));
  }
  const int tp_size = flags.world_size / stages;
  if (absl::Status s = ShardLayout::Make(config, 0, tp_size, 0, stages).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--world-size ", flags.world_size, " in ",
                                                   stages, " stage(s): ", s.message()));
  }
  if (stages > 1 && (flags.speculative == "draft" || flags.speculative == "self")) {
    return absl::InvalidArgumentError(
        "--pipeline-parallel-size above 1 runs without a draft model (--speculative draft or "
        "self); --speculative ngram works");
  }
  if (flags.steps_in_flight > stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps-in-flight ", flags.steps_in_flight, " is more than the ", stages,
                     " pipeline stage(s): a stage runs one step at a time"));
  }
  if (flags.speculative == "draft" && flags.draft_model.empty()) {
    return absl::InvalidArgumentError("--speculative draft needs --draft-model");
  }
  if (flags.speculative == "self") {
    plan.self_spec_layers =
        flags.self_spec_layers > 0
            ? flags.self_spec_layers
            : static_cast<int32_t>(std::max<int64_t>(1, config.num_layers / 4));
    if (plan.self_spec_layers >= config.num_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("--self-spec-layers ", plan.self_spec_layers,
                       ": the draft must be fewer layers than the model's ", config.num_layers));
    }
  }
  WorkerInitOptions& init = plan.init;
  // Empty: each worker loads the file of its own --model (paths are per host); LoadShard then
  // checks by size and fingerprint that every rank loaded the same model.
  init.model_path = "";
  init.block_size = flags.block_size;
  init.kv_cache_blocks = flags.kv_cache_blocks;
  init.kv_cache_bytes = flags.kv_cache_memory_mib << 20;
  init.kv_cache_fp8 = flags.kv_cache_dtype != "auto";
  init.weights_fp8 = flags.quantization == "fp8";
  // Every rank of a pipeline gets its steps from the coordinator: only stage 0's would relay.
  init.relay_steps = !flags.no_step_relay && stages == 1;
  init.pipeline_size = stages;
  init.device = flags.device == "cuda" ? v1::DEVICE_CUDA : v1::DEVICE_CPU;
  init.max_num_seqs = flags.max_num_seqs;
  init.max_num_batched_tokens = flags.max_num_batched_tokens;
  init.enforce_eager = flags.enforce_eager;
  if (flags.speculative == "draft") init.draft_model_path = flags.draft_model;
  init.self_spec_layers = plan.self_spec_layers;
  ASSIGN_OR_RETURN(plan.loras, ParseLoraModules(flags.lora_modules, served_name, flags.max_loras));
  init.loras = plan.loras;
  init.max_loras = flags.max_loras > 0 ? flags.max_loras : static_cast<int32_t>(plan.loras.size());
  init.max_lora_rank = flags.max_lora_rank;

  plan.http.max_connections = flags.http_max_connections;
  plan.http.io_threads = flags.http_io_threads;
  plan.http.max_body_bytes = static_cast<size_t>(flags.http_max_body_bytes);
  plan.http.header_timeout = absl::Seconds(flags.http_header_timeout_s);
  return plan;
}

EngineOptions MakeEngineOptions(const CoordinatorFlags& flags, const ModelConfig& config,
                                const LoadedModel& loaded, int64_t* model_context) {
  EngineOptions options;
  options.block_size = flags.block_size;
  options.num_blocks = static_cast<int32_t>(loaded.kv_cache_blocks);
  const int64_t supported =
      loaded.context_length > 0 ? loaded.context_length : config.context_length;
  if (model_context != nullptr) *model_context = supported;
  // A sequence can never outgrow the KV pool: advertise (and enforce) what fits.
  options.context_length =
      std::min(supported, int64_t{options.num_blocks} * flags.block_size);
  options.vocab_size = loaded.vocab_size > 0 ? loaded.vocab_size : config.vocab_size;
  options.step_timeout = absl::Seconds(flags.step_timeout_s);
  options.max_num_seqs = flags.max_num_seqs;
  options.max_num_batched_tokens = flags.max_num_batched_tokens;
  options.max_step_attention = flags.max_step_attention;
  options.enable_prefix_cache = !flags.no_prefix_cache;
  options.jump_forward = !flags.no_jump_forward;
  options.num_speculative_tokens = flags.speculative != "none" ? flags.num_speculative_tokens : 0;
  options.draft_model = flags.speculative == "draft" || flags.speculative == "self";
  options.spec_disable_batch_size = flags.spec_disable_batch_size;
  options.spec_min_acceptance = flags.spec_min_acceptance;
  options.ngram.min_n = flags.ngram.min_n;
  options.ngram.max_n = std::max(flags.ngram.min_n, flags.ngram.max_n);
  options.max_queued_requests = flags.max_queued_requests;
  options.recovery_grace = absl::Seconds(flags.recovery_grace_s);
  options.steps_in_flight =
      flags.steps_in_flight > 0 ? flags.steps_in_flight : flags.pipeline_parallel_size;
  options.limits = flags.limits;
  options.grammar.timeout = absl::Seconds(flags.limits.grammar_compile_timeout_s);
  options.grammar.max_bytes = flags.limits.max_constraint_bytes;
  return options;
}

}  // namespace tpserve
