#include "cli/tpctl_plan.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "absl/strings/str_format.h"
#include "model/gguf_file.h"
#include "model/hf_folder.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

struct GpuPreset {
  double memory_gib;  // as nvidia-smi reports it
  double hbm_tb_per_s;
};

const std::map<std::string, GpuPreset>& GpuPresets() {
  static const auto* presets = new std::map<std::string, GpuPreset>{
      {"a100-80g", {80.0, 2.039}}, {"h100", {79.65, 3.35}}, {"h200", {140.4, 4.8}}};
  return *presets;
}

// A GGUF file, or a Hugging Face folder's config.json.
absl::StatusOr<ModelConfig> LoadShape(const std::string& model) {
  std::error_code ec;
  if (std::filesystem::is_directory(model, ec)) return HfFolderShape(model);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(model);
  if (!file.ok()) return file.status();
  return ModelConfig::FromGguf(**file);
}

double Gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

CLI::App* AddPlanCommand(CLI::App& app, PlanFlags* f) {
  CLI::App* plan = app.add_subcommand(
      "plan",
      "weights and KV cache per rank, sequences that fit and decode time, for a model on "
      "given GPUs (no cluster needed)");
  PlanHardware& hw = f->hardware;
  plan->add_option("--model", f->model, "GGUF file, or Hugging Face folder (its config.json)")
      ->required();
  plan->add_option("--gpu", f->gpu, "memory and bandwidth preset: a100-80g, h100, h200")
      ->capture_default_str()
      ->check(CLI::IsMember({"a100-80g", "h100", "h200"}));
  plan->add_option("--weights", f->weights, "linear weights: bf16, or fp8 (e4m3, per-row scales)")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp8"}));
  plan->add_option("--kv-cache-dtype", f->kv_cache_dtype, "bf16 or fp8")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp8"}));
  plan->add_option("--tp", hw.tp, "tensor-parallel size (GPUs per pipeline stage)")
      ->capture_default_str();
  plan->add_option("--pp", hw.pp, "pipeline stages, each a balanced share of the layers")
      ->capture_default_str();
  plan->add_option("--gpus-per-node", hw.gpus_per_node, "GPUs a node holds")->capture_default_str();
  plan->add_option("--context", f->context, "tokens per sequence")->capture_default_str();
  plan->add_option("--gpu-memory-gib", hw.gpu_memory_gib, "GPU memory (default: the preset's)");
  plan->add_option("--gpu-memory-utilization", hw.gpu_memory_utilization,
                   "share of it tpserve takes")
      ->capture_default_str();
  plan->add_option("--overhead-gib", hw.overhead_gib, "activations, workspaces, graphs")
      ->capture_default_str();
  plan->add_option("--hbm-tb-per-s", hw.hbm_tb_per_s, "HBM bandwidth (default: the preset's)");
  plan->add_option("--nvlink-gb-per-s", hw.nvlink_gb_per_s, "per GPU and direction")
      ->capture_default_str();
  plan->add_option("--network-gb-per-s", hw.network_gb_per_s,
                   "between nodes, per GPU and direction")
      ->capture_default_str();
  plan->add_option("--nvlink-latency-us", hw.nvlink_latency_us, "per all-reduce within a node")
      ->capture_default_str();
  plan->add_option("--network-latency-us", hw.network_latency_us, "per all-reduce across nodes")
      ->capture_default_str();
  plan->add_option("--block-size", hw.block_size, "tokens per KV block")->capture_default_str();
  return plan;
}

int RunPlan(const CLI::App& command, const PlanFlags& f, bool json) {
  absl::StatusOr<ModelConfig> config = LoadShape(f.model);
  if (!config.ok()) {
    std::fprintf(stderr, "tpctl plan: --model: %s\n",
                 std::string(config.status().message()).c_str());
    return 1;
  }
  PlanHardware hw = f.hardware;
  const GpuPreset& preset = GpuPresets().at(f.gpu);
  if (command.count("--gpu-memory-gib") == 0) hw.gpu_memory_gib = preset.memory_gib;
  if (command.count("--hbm-tb-per-s") == 0) hw.hbm_tb_per_s = preset.hbm_tb_per_s;
  const PlanDtype weights = f.weights == "fp8" ? PlanDtype::kFp8 : PlanDtype::kBf16;
  const PlanDtype kv = f.kv_cache_dtype == "fp8" ? PlanDtype::kFp8 : PlanDtype::kBf16;
  absl::StatusOr<PlanResult> r = PlanCapacity(*config, weights, kv, hw, f.context);
  if (!r.ok()) {
    std::fprintf(stderr, "tpctl plan: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  const double step_ms = r->decode_ms + r->allreduce_ms + r->p2p_ms;
  if (json) {
    nlohmann::json stages = nlohmann::json::array();
    for (const StagePlan& s : r->stages) {
      stages.push_back({{"first_layer", s.first_layer},
                        {"layers", s.layers},
                        {"rank_weight_bytes", s.rank_weight_bytes},
                        {"kv_bytes_per_token", s.kv_bytes_per_token},
                        {"kv_blocks", s.kv_blocks},
                        {"decode_read_bytes", s.decode_read_bytes},
                        {"decode_ms", s.decode_ms},
                        {"allreduce_ms", s.allreduce_ms}});
    }
    const nlohmann::json out = {
        {"params", r->params},
        {"tp", hw.tp},
        {"pp", hw.pp},
        {"nodes", r->nodes},
        {"weights", f.weights},
        {"kv_cache_dtype", f.kv_cache_dtype},
        {"gpu_memory_gib", hw.gpu_memory_gib},
        {"rank_weight_bytes", r->rank_weight_bytes},
        {"kv_bytes_per_token", r->kv_bytes_per_token},
        {"kv_blocks", r->kv_blocks},
        {"kv_tokens", r->kv_tokens},
        {"context", f.context},
        {"sequences", r->sequences},
        {"decode_read_bytes", r->decode_read_bytes},
        {"decode_ms", r->decode_ms},
        {"allreduce_ms", r->allreduce_ms},
        {"p2p_ms", r->p2p_ms},
        {"stages", stages},
        {"itl_ms", step_ms},
        {"warning", r->warning},
    };
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf(
      "model: %lld layers, hidden %lld, %lld heads over %lld KV heads, MLP %lld, "
      "vocabulary %lld: %.2f B parameters\n",
      static_cast<long long>(config->num_layers), static_cast<long long>(config->hidden_size),
      static_cast<long long>(config->num_heads), static_cast<long long>(config->num_kv_heads),
      static_cast<long long>(config->intermediate_size), static_cast<long long>(config->vocab_size),
      r->params / 1e9);
  std::printf(
      "plan: TP %d%s on %d node(s) of %d GPUs (%.1f GiB, %.2f TB/s each), weights %s, KV "
      "cache %s\n",
      hw.tp, hw.pp > 1 ? absl::StrFormat(" x PP %d", hw.pp).c_str() : "", r->nodes,
      hw.gpus_per_node, hw.gpu_memory_gib, hw.hbm_tb_per_s, f.weights.c_str(),
      f.kv_cache_dtype.c_str());
  if (hw.pp > 1) {
    for (size_t i = 0; i < r->stages.size(); ++i) {
      const StagePlan& s = r->stages[i];
      std::printf(
          "stage %zu (layers %lld-%lld), rank 0: weights %.2f GiB; KV pool %lld blocks (%lld B a "
          "token); decode %.2f ms + %.2f ms of all-reduces\n",
          i, static_cast<long long>(s.first_layer),
          static_cast<long long>(s.first_layer + s.layers - 1), Gib(s.rank_weight_bytes),
          static_cast<long long>(s.kv_blocks), static_cast<long long>(s.kv_bytes_per_token),
          s.decode_ms, s.allreduce_ms);
    }
  }
  std::printf(
      "%s: weights %.2f GiB; KV pool %lld blocks of %d = %lld tokens (%lld B a token): "
      "%lld sequences of %lld tokens\n",
      hw.pp > 1 ? "fullest rank, smallest pool" : "rank 0", Gib(r->rank_weight_bytes),
      static_cast<long long>(r->kv_blocks), hw.block_size, static_cast<long long>(r->kv_tokens),
      static_cast<long long>(r->kv_bytes_per_token), static_cast<long long>(r->sequences),
      static_cast<long long>(f.context));
  std::printf(
      "decode at batch 1 (bandwidth bound): %.2f ms reading %.2f GB a token + %.2f ms of "
      "all-reduces%s = %.2f ms a token (%.0f tokens/s)\n",
      r->decode_ms, r->decode_read_bytes / 1e9, r->allreduce_ms,
      hw.pp > 1 ? absl::StrFormat(" + %.3f ms between stages", r->p2p_ms).c_str() : "", step_ms,
      1000.0 / step_ms);
  if (!r->warning.empty()) std::printf("warning: %s\n", r->warning.c_str());
  return 0;
}

}  // namespace tpserve
