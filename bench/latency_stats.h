// Summaries of latency samples as the serving benchmark reports them.
#pragma once

#include <cstdint>
#include <vector>

namespace tpserve::bench {

struct LatencySummary {
  int64_t count = 0;
  double mean = 0;
  double p50 = 0;
  double p99 = 0;
};

// The `p`-th percentile (p in [0, 100]) of `sorted` (ascending), interpolating linearly between
// the closest ranks as numpy does, so p50 of {1, 2} is 1.5. 0 for no samples.
double Percentile(const std::vector<double>& sorted, double p);

// Sorts `samples` and summarizes them; all zeros for no samples.
LatencySummary Summarize(std::vector<double> samples);

}  // namespace tpserve::bench
