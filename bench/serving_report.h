// What a serving benchmark measured: per-request timings and usage, and the summary printed as a
// table and written as JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "bench/latency_stats.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "tpserve/v1/inference.pb.h"

namespace tpserve::bench {

// What one request saw. Times are seconds since its phase (warm-up or measured run) started.
struct RequestResult {
  grpc::Status status;
  double start_s = 0;
  double first_token_s = -1;  // -1: no token arrived
  double end_s = 0;
  // One gap per token after the first. A chunk of k tokens arriving `g` after the previous
  // token spreads `g` evenly (k gaps of g/k), so the mean gap matches the decode rate however
  // the server batches its writes; extra tokens in the first chunk arrived with the first token
  // and count as zero gaps.
  std::vector<double> itl_s;
  v1::Usage usage;  // from the last chunk
};

struct ServingReport {
  int completed = 0;
  int failed = 0;
  double duration_s = 0;  // from the phase start to the last request's end
  double requests_per_s = 0;
  double output_tokens_per_s = 0;
  double total_tokens_per_s = 0;  // prompt and output tokens
  LatencySummary ttft_ms;         // to the first chunk that carries tokens
  LatencySummary itl_ms;
  LatencySummary e2e_ms;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  double prefix_hit_rate = 0;  // cached_prompt_tokens / prompt_tokens
  // Shared-prefix mode only: sum of min(cached, shared_prefix_len) over shared_prefix_len per
  // request, over the completed requests except the first sent (which finds nothing cached).
  std::optional<double> shared_prefix_hit_rate;
};

// `results[0]` is the first request sent. Latencies, tokens and hit rates cover completed
// requests only; failed ones count in `failed` and stretch the duration.
ServingReport MakeServingReport(const std::vector<RequestResult>& results, int shared_prefix_len);

// The results as table rows on stdout.
void PrintServingReport(const ServingReport& report);

// The same numbers as JSON, latencies as {"p50", "p99", "mean", "count"} in ms.
nlohmann::json ServingReportJson(const ServingReport& report);

}  // namespace tpserve::bench
