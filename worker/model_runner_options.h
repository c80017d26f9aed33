// How a worker loads and runs its model: the device, the KV pool's size and the CUDA limits.
#pragma once

#include <cstdint>
#include <string>

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
  CudaRunnerOptions cuda;
};

}  // namespace tpserve
