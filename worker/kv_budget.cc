#include "worker/kv_budget.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace tpserve {

absl::StatusOr<int64_t> KvBlocksForUtilization(const DeviceMemory& memory, double utilization,
                                               int64_t reserve_bytes, int64_t bytes_per_block,
                                               int64_t max_blocks) {
  if (!(utilization > 0.0 && utilization <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--gpu-memory-utilization %g is outside (0, 1]", utilization));
  }
  if (memory.total_bytes <= 0 || memory.free_bytes < 0 || memory.free_bytes > memory.total_bytes ||
      bytes_per_block <= 0 || reserve_bytes < 0 || max_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV budget: bad sizes (total %d, free %d, reserve %d, block %d bytes, at most %d blocks)",
        memory.total_bytes, memory.free_bytes, reserve_bytes, bytes_per_block, max_blocks));
  }
  const int64_t allowed =
      static_cast<int64_t>(std::floor(utilization * static_cast<double>(memory.total_bytes)));
  const int64_t used = memory.total_bytes - memory.free_bytes;
  const int64_t budget = allowed - used - reserve_bytes;
  const int64_t blocks = budget > 0 ? budget / bytes_per_block : 0;
  if (blocks <= 0) {
    constexpr double kMiB = 1 << 20;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "no KV block fits: --gpu-memory-utilization %.2f allows %.0f MiB of %.0f MiB, weights "
        "and buffers (with other processes) use %.0f MiB, %.0f MiB is kept for CUDA graphs and "
        "libraries, and one block takes %.2f MiB; raise the utilization, use more ranks, or a "
        "smaller model",
        utilization, allowed / kMiB, memory.total_bytes / kMiB, used / kMiB, reserve_bytes / kMiB,
        bytes_per_block / kMiB));
  }
  return std::min(blocks, max_blocks);
}

}  // namespace tpserve
