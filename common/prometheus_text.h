// Pieces of the Prometheus text exposition format 0.0.4 that the coordinator's /metrics and the
// workers' metrics ports both write.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tpserve {

// Shortest text that parses back to the same double ("0.001", "1", "2560"), in the spellings
// Prometheus uses for the non-finite values.
std::string FormatPrometheusDouble(double value);

// A label value with backslash, double quote and line feed escaped, as the format requires.
std::string EscapeLabelValue(absl::string_view value);

// The # HELP and # TYPE lines of `name`. In format 0.0.4 a TYPE line names the samples it types,
// so a counter's carry the full `_total` name, as the Go and Python clients (and so vLLM) write
// it; the OpenMetrics convention of a family name without `_total` would leave them untyped.
void AppendMetricHeader(std::string& out, absl::string_view name, absl::string_view type,
                        absl::string_view help);

// A histogram's samples: a cumulative `le` bucket per bound, +Inf, _sum and _count, each with
// `labels` (`k="v",...`, escaped) before its `le`. `counts` has bounds.size() + 1 entries, not
// cumulative, the last above every bound.
void AppendHistogramSamples(std::string& out, absl::string_view name, absl::string_view labels,
                            const std::vector<double>& bounds, const std::vector<int64_t>& counts,
                            double sum, int64_t count);

}  // namespace tpserve
