#include "common/prometheus_text.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace tpserve {

std::string FormatPrometheusDouble(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  TP_CHECK(error == std::errc());
  return std::string(buffer, end);
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        escaped += "\\\\";
        break;
      case '"':
        escaped += "\\\"";
        break;
      case '\n':
        escaped += "\\n";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

void AppendMetricHeader(std::string& out, absl::string_view name, absl::string_view type,
                        absl::string_view help) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void AppendHistogramSamples(std::string& out, absl::string_view name, absl::string_view labels,
                            const std::vector<double>& bounds, const std::vector<int64_t>& counts,
                            double sum, int64_t count) {
  TP_CHECK(counts.size() == bounds.size() + 1);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    absl::StrAppend(&out, name, "_bucket{", labels, ",le=\"", FormatPrometheusDouble(bounds[i]),
                    "\"} ", cumulative, "\n");
  }
  cumulative += counts.back();
  absl::StrAppend(&out, name, "_bucket{", labels, ",le=\"+Inf\"} ", cumulative, "\n");
  absl::StrAppend(&out, name, "_sum{", labels, "} ", FormatPrometheusDouble(sum), "\n");
  absl::StrAppend(&out, name, "_count{", labels, "} ", count, "\n");
}

}  // namespace tpserve
