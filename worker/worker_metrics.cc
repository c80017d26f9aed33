#include "worker/worker_metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/prometheus_text.h"

namespace tpserve {

StepDurations::StepDurations()
    : bounds({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
              60.0}),
      counts(bounds.size() + 1, 0) {}

void StepDurations::Observe(double seconds) {
  const auto bucket = std::lower_bound(bounds.begin(), bounds.end(), seconds) - bounds.begin();
  ++counts[bucket];
  sum += seconds;
  ++count;
}

std::string RenderWorkerMetrics(const WorkerMetricsSnapshot& s) {
  const std::string rank = absl::StrCat("rank=\"", s.rank, "\"");
  std::string out;
  auto single = [&](absl::string_view name, absl::string_view type, absl::string_view help,
                    absl::string_view value) {
    AppendMetricHeader(out, name, type, help);
    absl::StrAppend(&out, name, "{", rank, "} ", value, "\n");
  };
  AppendMetricHeader(out, "tpserve_worker:step_duration_seconds", "histogram",
                     "Histogram of the time this rank took for a step, in seconds.");
  AppendHistogramSamples(out, "tpserve_worker:step_duration_seconds", rank, s.steps.bounds,
                         s.steps.counts, s.steps.sum, s.steps.count);
  single("tpserve_worker:collective_seconds_total", "counter",
         "Seconds this rank spent in all-reduces and gathers of its CPU communicator.",
         FormatPrometheusDouble(s.collective_seconds));
  single("tpserve_worker:collectives_total", "counter",
         "All-reduces and gathers of this rank's CPU communicator.", absl::StrCat(s.collectives));
  single("tpserve_worker:kv_cache_blocks", "gauge", "KV cache blocks of this rank's pool.",
         absl::StrCat(s.kv_cache_blocks));
  single("tpserve_worker:weight_bytes", "gauge", "Bytes of this rank's weights.",
         absl::StrCat(s.weight_bytes));
  AppendMetricHeader(out, "tpserve_worker:state", "gauge",
                     "1 for the state this rank is in (starting, initialized, loaded, serving, "
                     "failed).");
  absl::StrAppend(&out, "tpserve_worker:state{", rank, ",state=\"", EscapeLabelValue(s.state),
                  "\"} 1\n");
  return out;
}

}  // namespace tpserve
