// A PEFT LoRA adapter (a folder with adapter_config.json and adapter_model.safetensors), read for
// a model of a given shape: per layer and target module, A [r, in] and B [out, r] in fp32, B
// already multiplied by the scale (lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora), so
// that a module's output gains B · (A · x).
//
// Targets: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, in any subset. The
// tensors are named as PEFT saves them,
// base_model.model.model.layers.<i>.{self_attn,mlp}.<module>.lora_{A,B}.weight, in F32, F16 or
// BF16. For a model whose RoPE rotates adjacent pairs (GGUF "llama", whose q and k rows llama.cpp
// permuted from Hugging Face's order), B's q and k rows are permuted the same way, so an adapter
// trained on the Hugging Face model applies to the GGUF file.
//
// Refused, naming the file and the key or tensor: another PEFT type, DoRA, biases, fan_in_fan_out,
// rank or alpha patterns, layers_to_transform, modules_to_save, a rank over `max_rank`, a tensor
// whose shape is not the model's, a tensor of a module the config does not target, an unknown
// tensor.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_config.h"

namespace tpserve {

enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraTargets = 7;
const char* LoraTargetName(LoraTarget target);  // "q_proj", ...

struct LoraModule {
  int64_t in = 0;
  int64_t out = 0;
  std::vector<float> a;  // [rank, in]
  std::vector<float> b;  // [out, rank], times the scale
};

struct LoraAdapter {
  int64_t rank = 0;
  // [num_layers][target]: the modules the adapter changes (unset: the base weight alone).
  std::vector<std::array<std::optional<LoraModule>, kNumLoraTargets>> layers;

  int64_t bytes() const;  // of A and B, all layers
};

absl::StatusOr<LoraAdapter> LoadLoraAdapter(const std::string& dir, const ModelConfig& config,
                                            int64_t max_rank);

}  // namespace tpserve
