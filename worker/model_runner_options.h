// How a worker loads and runs its model: the device, the KV pool's size and the CUDA limits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "worker/comm/pipeline_links.h"
#include "worker/cpu_weights.h"

namespace tpserve {

enum class Device { kCpu, kCuda };

// CUDA-only settings (ignored on the CPU).
struct CudaRunnerOptions {
  int device = 0;  // CUDA device ordinal on this host
  // Share of the device's memory tpserve may fill (weights, buffers, KV pool) when the KV pool is
  // sized by neither blocks nor bytes.
  double gpu_memory_utilization = 0.9;
  // The most sequences and tokens one step carries (the scheduler's limits): the static step
  // buffers and the decode CUDA graphs are sized by them.
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  bool enforce_eager = false;  // true: no CUDA graphs
};

struct ModelRunnerOptions {
  std::string model_path;
  Device device = Device::kCpu;
  int64_t block_size = 16;
  // The KV pool: `kv_cache_blocks` blocks when positive; else as many as `kv_cache_bytes` holds
  // when positive; else (CUDA) what cuda.gpu_memory_utilization leaves after everything else.
  int64_t kv_cache_blocks = 0;
  int64_t kv_cache_bytes = 0;
  // With a byte budget: grow the pool to hold one full context (config.context_length tokens)
  // when the budget holds less; the worker's default budget asks this, an operator's does not.
  bool kv_cache_holds_context = false;
  // K and V stored as FP8 E4M3 codes (kernels/cpu/fp8_e4m3.h) instead of fp32 or bf16.
  bool kv_cache_fp8 = false;
  // CUDA: every linear but the embedding and the output head as FP8 W8A8 (weights quantized at
  // load, per output channel; activations per token; kernels/cpu/fp8_matmul.h states the format).
  bool weights_fp8 = false;
  CpuWeights cpu_weights = CpuWeights::kAuto;
  CudaRunnerOptions cuda;
  // Speculative decoding's draft model (worker/draft_runner.h), loaded by rank 0 on its CPU;
  // empty for none. With `draft_num_layers` > 0, only its first that many layers (the final norm
  // and output head after them): self-speculation names the target itself.
  std::string draft_model_path;
  int64_t draft_num_layers = 0;
  // Load only the model's first this many layers, then its final norm and output head; 0: all.
  int64_t num_layers = 0;
  // Pipeline parallelism: this rank's stage of `pipeline_stages` (model/shard_layout.h says which
  // layers it holds), and the links its hidden states move through, which must outlive the model
  // (null for one stage). A CUDA model sends and receives on their device side.
  int pipeline_stage = 0;
  int pipeline_stages = 1;
  PipelineLinks* links = nullptr;
  // LoRA adapters (PEFT folders) served beside the base model, each in its slot (1 and up), in
  // a table of `max_loras` slots; ranks over `max_lora_rank` are refused. A CUDA rank holds the
  // slots in device memory sized at load for `max_lora_rank`.
  struct Lora {
    int32_t slot = 0;
    std::string path;
  };
  std::vector<Lora> loras;
  int32_t max_loras = 0;
  int64_t max_lora_rank = 64;
  // Told the loading's progress (worker/shard_loader.h); may be empty.
  std::function<void(int64_t done_bytes, int64_t total_bytes)> load_progress;
};

}  // namespace tpserve
