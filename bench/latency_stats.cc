#include "bench/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tpserve::bench {

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(rank));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double weight = rank - static_cast<double>(below);
  return sorted[below] + (sorted[above] - sorted[below]) * weight;
}

LatencySummary Summarize(std::vector<double> samples) {
  LatencySummary summary;
  if (samples.empty()) return summary;
  std::sort(samples.begin(), samples.end());
  summary.count = static_cast<int64_t>(samples.size());
  summary.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / summary.count;
  summary.p50 = Percentile(samples, 50);
  summary.p99 = Percentile(samples, 99);
  return summary;
}

}  // namespace tpserve::bench
