#include "bench/serving_report.h"

#include <algorithm>
#include <cstdio>

namespace tpserve::bench {

ServingReport MakeServingReport(const std::vector<RequestResult>& results, int shared_prefix_len) {
  ServingReport report;
  std::vector<double> ttft_ms, itl_ms, e2e_ms;
  int64_t shared_cached = 0;
  int64_t shared_requests = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const RequestResult& r = results[i];
    report.duration_s = std::max(report.duration_s, r.end_s);
    if (!r.status.ok()) {
      ++report.failed;
      continue;
    }
    ++report.completed;
    if (r.first_token_s >= 0) ttft_ms.push_back((r.first_token_s - r.start_s) * 1e3);
    for (double gap : r.itl_s) itl_ms.push_back(gap * 1e3);
    e2e_ms.push_back((r.end_s - r.start_s) * 1e3);
    report.prompt_tokens += r.usage.prompt_tokens();
    report.completion_tokens += r.usage.completion_tokens();
    report.cached_prompt_tokens += r.usage.cached_prompt_tokens();
    if (i > 0) {
      shared_cached += std::min(r.usage.cached_prompt_tokens(), shared_prefix_len);
      ++shared_requests;
    }
  }
  if (report.duration_s > 0) {
    report.requests_per_s = report.completed / report.duration_s;
    report.output_tokens_per_s = report.completion_tokens / report.duration_s;
    report.total_tokens_per_s =
        (report.prompt_tokens + report.completion_tokens) / report.duration_s;
  }
  report.ttft_ms = Summarize(std::move(ttft_ms));
  report.itl_ms = Summarize(std::move(itl_ms));
  report.e2e_ms = Summarize(std::move(e2e_ms));
  if (report.prompt_tokens > 0) {
    report.prefix_hit_rate =
        static_cast<double>(report.cached_prompt_tokens) / report.prompt_tokens;
  }
  if (shared_prefix_len > 0 && shared_requests > 0) {
    report.shared_prefix_hit_rate =
        static_cast<double>(shared_cached) / (shared_requests * shared_prefix_len);
  }
  return report;
}

void PrintServingReport(const ServingReport& r) {
  std::printf("requests                %d completed, %d failed in %.2f s\n", r.completed, r.failed,
              r.duration_s);
  std::printf("request throughput      %.3f req/s\n", r.requests_per_s);
  std::printf("output token throughput %.1f tok/s\n", r.output_tokens_per_s);
  std::printf("total token throughput  %.1f tok/s\n", r.total_tokens_per_s);
  std::printf("%-20s %10s %10s %10s\n", "latency (ms)", "p50", "p99", "mean");
  const auto row = [](const char* name, const LatencySummary& s) {
    std::printf("%-20s %10.2f %10.2f %10.2f\n", name, s.p50, s.p99, s.mean);
  };
  row("TTFT", r.ttft_ms);
  row("inter-token", r.itl_ms);
  row("end-to-end", r.e2e_ms);
  std::printf("prefix hit rate         %.1f%% (%lld of %lld prompt tokens cached)\n",
              r.prefix_hit_rate * 100, static_cast<long long>(r.cached_prompt_tokens),
              static_cast<long long>(r.prompt_tokens));
  if (r.shared_prefix_hit_rate) {
    std::printf("shared prefix hit rate  %.1f%% (requests after the first)\n",
                *r.shared_prefix_hit_rate * 100);
  }
}

namespace {

nlohmann::json SummaryJson(const LatencySummary& s) {
  return {{"p50", s.p50}, {"p99", s.p99}, {"mean", s.mean}, {"count", s.count}};
}

}  // namespace

nlohmann::json ServingReportJson(const ServingReport& r) {
  return {
      {"completed", r.completed},
      {"failed", r.failed},
      {"duration_s", r.duration_s},
      {"requests_per_s", r.requests_per_s},
      {"output_tokens_per_s", r.output_tokens_per_s},
      {"total_tokens_per_s", r.total_tokens_per_s},
      {"ttft_ms", SummaryJson(r.ttft_ms)},
      {"itl_ms", SummaryJson(r.itl_ms)},
      {"e2e_latency_ms", SummaryJson(r.e2e_ms)},
      {"prompt_tokens", r.prompt_tokens},
      {"completion_tokens", r.completion_tokens},
      {"cached_prompt_tokens", r.cached_prompt_tokens},
      {"prefix_hit_rate", r.prefix_hit_rate},
      {"shared_prefix_hit_rate",
       r.shared_prefix_hit_rate ? nlohmann::json(*r.shared_prefix_hit_rate) : nlohmann::json()},
  };
}

}  // namespace tpserve::bench
