// How far the ranks are through loading their shards: written by WorkerPool::LoadShard as it
// polls them, read by Health (HealthResponse.load_done_bytes), which the launcher's progress line
// shows.
#pragma once

#include <atomic>
#include <cstdint>

namespace tpserve {

struct LoadProgress {
  std::atomic<int64_t> done_bytes{0};   // the slowest rank's, of the model file's tensors
  std::atomic<int64_t> total_bytes{0};  // 0 until a rank has opened the file
};

}  // namespace tpserve
