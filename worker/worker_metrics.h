// What a worker rank exports on its metrics port (tpserve-worker --metrics-port), each sample
// labelled with its rank:
//   histogram  tpserve_worker:step_duration_seconds (a step on this rank, from its start to its
//              answer: the model, the collectives, the sampling on a rank that samples)
//   counters   tpserve_worker:collective_seconds_total, tpserve_worker:collectives_total (time
//              in and number of all-reduces and gathers of the CPU communicator; a CUDA rank's
//              run on the device stream, inside the step's time)
//   gauges     tpserve_worker:kv_cache_blocks, tpserve_worker:weight_bytes,
//              tpserve_worker:state{state} (1 for the state the rank is in)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpserve {

// A histogram of step durations in seconds, with fixed bounds from 1 ms to 60 s.
struct StepDurations {
  StepDurations();
  void Observe(double seconds);

  std::vector<double> bounds;
  std::vector<int64_t> counts;  // [bounds.size() + 1], not cumulative
  double sum = 0;
  int64_t count = 0;
};

struct WorkerMetricsSnapshot {
  int rank = 0;
  std::string state;
  int64_t kv_cache_blocks = 0;
  int64_t weight_bytes = 0;
  StepDurations steps;
  double collective_seconds = 0;
  int64_t collectives = 0;
};

// The exposition (Prometheus text format 0.0.4), ending in a newline.
std::string RenderWorkerMetrics(const WorkerMetricsSnapshot& snapshot);

}  // namespace tpserve
