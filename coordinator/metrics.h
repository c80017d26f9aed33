// The coordinator's Prometheus metrics (served at /metrics), named like vLLM's under `tpserve:`.
//
//   histograms  tpserve:time_to_first_token_seconds, tpserve:inter_token_latency_seconds,
//               tpserve:e2e_request_latency_seconds, tpserve:request_queue_time_seconds,
//               tpserve:recovery_duration_seconds (from a lost rank to the re-formed group)
//   gauges      tpserve:num_requests_running, tpserve:num_requests_waiting,
//               tpserve:kv_cache_usage_perc (fraction of KV blocks held by requests, 0..1),
//               tpserve:num_requests_held (waiting for the group to re-form),
//               tpserve:cluster_degraded (1 from a lost rank until the group re-forms)
//   counters    tpserve:prompt_tokens_total, tpserve:generation_tokens_total,
//               tpserve:prefix_cache_queries_total, tpserve:prefix_cache_hits_total (tokens),
//               tpserve:num_preemptions_total, tpserve:jump_forward_tokens_total,
//               tpserve:spec_decode_num_drafts_total, tpserve:spec_decode_num_draft_tokens_total,
//               tpserve:spec_decode_num_accepted_tokens_total (speculative decoding),
//               tpserve:request_success_total{finished_reason},
//               tpserve:requests_held_total, tpserve:requests_resumed_total,
//               tpserve:recoveries_total (a lost rank's requests held, resumed; re-formations),
//               tpserve:auth_failures_total{surface} (refused credentials: http, inference,
//               admin, cluster; common/auth_refusal.h)
//
//   info        tpserve:cache_config_info{block_size, num_gpu_blocks, enable_prefix_caching} 1,
//               once the KV pool is known
//
// With MetricNames::kVllm the series vLLM also has (every one above but the recovery and
// delivery histograms, num_requests_held, jump_forward_tokens_total, the acceptance-length
// histogram, the held / resumed / recoveries counters and auth_failures_total) are named `vllm:`
// instead, as vLLM names them, so that vLLM's dashboards, the Gateway API Inference Extension's
// endpoint picker (vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc,
// vllm:cache_config_info's block_size) and autoscalers on those series read tpserve unchanged.
//
// Every sample carries the label model_name. Rendered in the Prometheus text exposition format
// 0.0.4 (# HELP and # TYPE lines, cumulative `le` buckets ending in +Inf, _sum and _count).
//
// Thread-safe: the engine thread records, HTTP threads render.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tpserve {

// What the engine counts itself: gauges, and totals since start.
struct EngineState {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_cache_usage = 0;  // fraction of the KV blocks requests hold
  int64_t num_preemptions = 0;
  int64_t prefix_cache_query_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t jump_forward_tokens = 0;
  int64_t spec_drafts = 0;  // speculative decoding: steps of a sequence with proposals
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  std::vector<int64_t> spec_acceptance_lengths;  // SchedulerCounters'; empty: no speculation
  int64_t num_held = 0;  // samples held while the group re-forms (RecoveryCounters for the rest)
  int64_t requests_held = 0;
  int64_t requests_resumed = 0;
  int64_t recoveries = 0;
  bool degraded = false;  // a rank was lost and the group has not re-formed yet
};

// Whose names the series vLLM also has carry (the coordinator's --metrics-names).
enum class MetricNames { kTpserve, kVllm };

class Metrics {
 public:
  explicit Metrics(std::string model_name, MetricNames names = MetricNames::kTpserve);

  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveE2eRequestLatency(double seconds);
  void ObserveRequestQueueTime(double seconds);
  // From a lost rank to the group serving again.
  void ObserveRecoveryTime(double seconds);
  // From the engine handing a token to its request to the front end writing it to the socket.
  void ObserveTokenDelivery(double seconds);

  void AddPromptTokens(int64_t n);
  void AddGenerationTokens(int64_t n);
  // `finished_reason`: "stop", "length" or "abort".
  void AddRequestSuccess(const std::string& finished_reason);
  // One refused credential on `surface` (kSurfaceHttp, ...: every surface is listed from 0).
  void AddAuthFailure(const std::string& surface);

  // What the engine counts itself, as of its last step: cumulative values and gauges.
  void SetEngineState(const EngineState& state);
  // The KV pool the coordinator serves with, for cache_config_info.
  void SetCacheConfig(int64_t block_size, int64_t num_blocks, bool prefix_caching);

  // The whole exposition, ending in a newline.
  std::string RenderPrometheus() const;

 private:
  struct Histogram {
    explicit Histogram(std::vector<double> upper_bounds)
        : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}
    std::vector<double> bounds;   // upper bounds, ascending; +Inf is implicit
    std::vector<int64_t> counts;  // [bounds.size() + 1], not cumulative
    double sum = 0;
    int64_t count = 0;
  };
  // Caller holds mutex_.
  static void Observe(Histogram& histogram, double value);

  const std::string model_name_;
  // The prefix of the series vLLM also has: "tpserve:" or "vllm:".
  const std::string shared_prefix_;

  mutable absl::Mutex mutex_;
  Histogram ttft_ ABSL_GUARDED_BY(mutex_);
  Histogram itl_ ABSL_GUARDED_BY(mutex_);
  Histogram e2e_ ABSL_GUARDED_BY(mutex_);
  Histogram queue_ ABSL_GUARDED_BY(mutex_);
  Histogram recovery_ ABSL_GUARDED_BY(mutex_);
  Histogram delivery_ ABSL_GUARDED_BY(mutex_);
  int64_t prompt_tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t generation_tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  std::map<std::string, int64_t> request_success_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, int64_t> auth_failures_ ABSL_GUARDED_BY(mutex_);
  EngineState engine_ ABSL_GUARDED_BY(mutex_);
  int64_t block_size_ ABSL_GUARDED_BY(mutex_) = 0;  // 0: cache_config_info not known yet
  int64_t num_blocks_ ABSL_GUARDED_BY(mutex_) = 0;
  bool prefix_caching_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace tpserve
