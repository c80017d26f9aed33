// How many KV blocks a CUDA rank gives its pool when the coordinator fixed neither a block count
// nor a byte budget: what --gpu-memory-utilization leaves once everything else is allocated (as
// vLLM's gpu_memory_utilization, measured rather than profiled: every activation buffer of a step
// is allocated up front, so nothing grows after the pool).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace tpserve {

struct DeviceMemory {
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;  // now, with the weights and step buffers already allocated
};

// blocks = (utilization * total - (total - free) - reserve) / bytes_per_block, at most
// `max_blocks`. `reserve` covers what is allocated later by others (CUDA graphs, cuBLASLt and
// NCCL internals). RESOURCE_EXHAUSTED naming the numbers when not one block fits;
// INVALID_ARGUMENT for a utilization outside (0, 1] or non-positive sizes.
absl::StatusOr<int64_t> KvBlocksForUtilization(const DeviceMemory& memory, double utilization,
                                               int64_t reserve_bytes, int64_t bytes_per_block,
                                               int64_t max_blocks);

}  // namespace tpserve
