#include "coordinator/metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/auth_refusal.h"
#include "common/check.h"
#include "common/prometheus_text.h"

namespace tpserve {
namespace {

// Bucket bounds in seconds, vLLM's, so that dashboards built for vLLM read tpserve unchanged.
std::vector<double> TtftBounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> InterTokenBounds() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> RequestBounds() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

// Token delivery is the front end's own overhead: around a millisecond, so the buckets are a
// quarter of one there, fine enough for a p99 read from them to be within 0.25 ms.
std::vector<double> DeliveryBounds() {
  return {0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.00125, 0.0015, 0.00175, 0.002, 0.0025,
          0.003,  0.004,   0.005,  0.0075,  0.01,  0.025,   0.05,   0.1,     0.25,  1.0};
}

// The reasons a dashboard can rely on seeing, at 0 before the first such request.
constexpr absl::string_view kFinishedReasons[] = {"stop", "length", "abort"};

}  // namespace

Metrics::Metrics(std::string model_name, MetricNames names)
    : model_name_(std::move(model_name)),
      shared_prefix_(names == MetricNames::kVllm ? "vllm:" : "tpserve:"),
      ttft_(TtftBounds()),
      itl_(InterTokenBounds()),
      e2e_(RequestBounds()),
      queue_(RequestBounds()),
      recovery_(RequestBounds()),
      delivery_(DeliveryBounds()) {
  for (absl::string_view reason : kFinishedReasons) request_success_[std::string(reason)] = 0;
  for (const char* surface : {kSurfaceHttp, kSurfaceInference, kSurfaceAdmin, kSurfaceCluster}) {
    auth_failures_[surface] = 0;
  }
}

void Metrics::Observe(Histogram& histogram, double value) {
  // One NaN would turn _sum into NaN for the life of the process.
  if (std::isnan(value)) return;
  size_t bucket = 0;
  while (bucket < histogram.bounds.size() && value > histogram.bounds[bucket]) ++bucket;
  ++histogram.counts[bucket];
  histogram.sum += value;
  ++histogram.count;
}

void Metrics::ObserveTimeToFirstToken(double seconds) {
  absl::MutexLock lock(&mutex_);
  Observe(ttft_, seconds);
}

void Metrics::ObserveInterTokenLatency(double seconds) {
  absl::MutexLock lock(&mutex_);
  Observe(itl_, seconds);
}

void Metrics::ObserveE2eRequestLatency(double seconds) {
  absl::MutexLock lock(&mutex_);
  Observe(e2e_, seconds);
}

void Metrics::ObserveRequestQueueTime(double seconds) {
  absl::MutexLock lock(&mutex_);
  Observe(queue_, seconds);
}

void Metrics::ObserveRecoveryTime(double seconds) {
  absl::MutexLock lock(&mutex_);
  Observe(recovery_, seconds);
}

void Metrics::ObserveTokenDelivery(double seconds) {
  absl::MutexLock lock(&mutex_);
  Observe(delivery_, seconds);
}

void Metrics::AddPromptTokens(int64_t n) {
  TP_CHECK(n >= 0);  // a counter that goes down reads as a restart to Prometheus
  absl::MutexLock lock(&mutex_);
  prompt_tokens_ += n;
}

void Metrics::AddGenerationTokens(int64_t n) {
  TP_CHECK(n >= 0);
  absl::MutexLock lock(&mutex_);
  generation_tokens_ += n;
}

void Metrics::AddRequestSuccess(const std::string& finished_reason) {
  absl::MutexLock lock(&mutex_);
  ++request_success_[finished_reason];
}

void Metrics::AddAuthFailure(const std::string& surface) {
  absl::MutexLock lock(&mutex_);
  ++auth_failures_[surface];
}

void Metrics::SetEngineState(const EngineState& state) {
  absl::MutexLock lock(&mutex_);
  engine_ = state;
}

void Metrics::SetCacheConfig(int64_t block_size, int64_t num_blocks, bool prefix_caching) {
  absl::MutexLock lock(&mutex_);
  block_size_ = block_size;
  num_blocks_ = num_blocks;
  prefix_caching_ = prefix_caching;
}

std::string Metrics::RenderPrometheus() const {
  const std::string model_label =
      absl::StrCat("model_name=\"", EscapeLabelValue(model_name_), "\"");
  std::string out;
  out.reserve(16 << 10);  // the whole exposition is about 10 KiB

  auto histogram = [&](absl::string_view name, absl::string_view help, const Histogram& h) {
    AppendMetricHeader(out, name, "histogram", help);
    AppendHistogramSamples(out, name, model_label, h.bounds, h.counts, h.sum, h.count);
  };
  // `value` is already formatted: int64 gauges and counters print as integers, doubles shortest.
  auto single = [&](absl::string_view name, absl::string_view type, absl::string_view help,
                    absl::string_view value) {
    AppendMetricHeader(out, name, type, help);
    absl::StrAppend(&out, name, "{", model_label, "} ", value, "\n");
  };

  auto shared = [this](absl::string_view name) { return absl::StrCat(shared_prefix_, name); };

  absl::MutexLock lock(&mutex_);
  histogram(shared("time_to_first_token_seconds"), "Histogram of time to first token in seconds.",
            ttft_);
  histogram(shared("inter_token_latency_seconds"), "Histogram of inter-token latency in seconds.",
            itl_);
  histogram(shared("e2e_request_latency_seconds"),
            "Histogram of end to end request latency in seconds.", e2e_);
  histogram(shared("request_queue_time_seconds"),
            "Histogram of time spent waiting in the queue in seconds.", queue_);
  histogram("tpserve:recovery_duration_seconds",
            "Histogram of time from a lost rank to the re-formed group serving again in seconds.",
            recovery_);
  histogram("tpserve:token_delivery_seconds",
            "Histogram of time from the engine handing a token over to its bytes reaching the "
            "client's socket in seconds.",
            delivery_);

  single(shared("num_requests_running"), "gauge", "Number of requests in the running batch.",
         absl::StrCat(engine_.num_running));
  single(shared("num_requests_waiting"), "gauge", "Number of requests waiting to be scheduled.",
         absl::StrCat(engine_.num_waiting));
  single(shared("kv_cache_usage_perc"), "gauge",
         "Fraction of KV cache blocks held by requests (1 means all).",
         FormatPrometheusDouble(engine_.kv_cache_usage));
  single("tpserve:cluster_degraded", "gauge",
         "1 while the cluster is degraded (a rank lost, the group not re-formed yet), else 0.",
         engine_.degraded ? "1" : "0");
  single("tpserve:num_requests_held", "gauge",
         "Number of requests held while the cluster re-forms after a lost rank.",
         absl::StrCat(engine_.num_held));

  single(shared("prompt_tokens_total"), "counter", "Number of prefill tokens processed.",
         absl::StrCat(prompt_tokens_));
  single(shared("generation_tokens_total"), "counter", "Number of generation tokens processed.",
         absl::StrCat(generation_tokens_));
  single(shared("prefix_cache_queries_total"), "counter",
         "Prefix cache queries, in number of prompt tokens looked up.",
         absl::StrCat(engine_.prefix_cache_query_tokens));
  single(shared("prefix_cache_hits_total"), "counter",
         "Prefix cache hits, in number of prompt tokens found cached.",
         absl::StrCat(engine_.prefix_cache_hit_tokens));
  single(shared("num_preemptions_total"), "counter", "Number of requests preempted.",
         absl::StrCat(engine_.num_preemptions));
  single("tpserve:jump_forward_tokens_total", "counter",
         "Generated tokens that an output constraint forced, appended without sampling.",
         absl::StrCat(engine_.jump_forward_tokens));
  single(shared("spec_decode_num_drafts_total"), "counter",
         "Speculative decoding: steps in which a request's proposed tokens were verified.",
         absl::StrCat(engine_.spec_drafts));
  single(shared("spec_decode_num_draft_tokens_total"), "counter",
         "Speculative decoding: tokens proposed.", absl::StrCat(engine_.spec_draft_tokens));
  single(shared("spec_decode_num_accepted_tokens_total"), "counter",
         "Speculative decoding: proposed tokens accepted.",
         absl::StrCat(engine_.spec_accepted_tokens));
  if (const std::vector<int64_t>& lengths = engine_.spec_acceptance_lengths; !lengths.empty()) {
    Histogram accepted(std::vector<double>(lengths.size() - 1));
    for (size_t i = 0; i < lengths.size(); ++i) {
      if (i + 1 < lengths.size()) accepted.bounds[i] = static_cast<double>(i);
      accepted.counts[i] = lengths[i];
      accepted.sum += static_cast<double>(i * lengths[i]);
      accepted.count += lengths[i];
    }
    histogram("tpserve:spec_decode_acceptance_length",
              "Speculative decoding: proposed tokens accepted per verified run of proposals.",
              accepted);
    const std::string per_pos = shared("spec_decode_num_accepted_tokens_per_pos_total");
    AppendMetricHeader(out, per_pos, "counter",
                       "Speculative decoding: proposals accepted at each position of their run.");
    for (size_t position = 0; position + 1 < lengths.size(); ++position) {
      int64_t reached = 0;  // runs that accepted more than `position` tokens
      for (size_t n = position + 1; n < lengths.size(); ++n) reached += lengths[n];
      absl::StrAppend(&out, per_pos, "{", model_label, ",position=\"", position, "\"} ", reached,
                      "\n");
    }
  }

  single("tpserve:requests_held_total", "counter", "Number of requests held when a rank was lost.",
         absl::StrCat(engine_.requests_held));
  single("tpserve:requests_resumed_total", "counter",
         "Number of held requests resumed after the cluster re-formed.",
         absl::StrCat(engine_.requests_resumed));
  single("tpserve:recoveries_total", "counter",
         "Number of times the cluster re-formed after a lost rank.",
         absl::StrCat(engine_.recoveries));

  const std::string success = shared("request_success_total");
  AppendMetricHeader(out, success, "counter", "Number of finished requests, by finished reason.");
  for (const auto& [reason, count] : request_success_) {
    absl::StrAppend(&out, success, "{", model_label, ",finished_reason=\"",
                    EscapeLabelValue(reason), "\"} ", count, "\n");
  }
  if (block_size_ > 0) {
    const std::string info = shared("cache_config_info");
    AppendMetricHeader(out, info, "gauge",
                       "Information of the KV cache: its labels; the value is 1.");
    absl::StrAppend(&out, info, "{", model_label, ",block_size=\"", block_size_,
                    "\",num_gpu_blocks=\"", num_blocks_, "\",enable_prefix_caching=\"",
                    prefix_caching_ ? "True" : "False", "\"} 1\n");
  }
  constexpr absl::string_view kAuthFailures = "tpserve:auth_failures_total";
  AppendMetricHeader(out, kAuthFailures, "counter", "Number of refused credentials, by surface.");
  for (const auto& [surface, count] : auth_failures_) {
    absl::StrAppend(&out, kAuthFailures, "{", model_label, ",surface=\"", EscapeLabelValue(surface),
                    "\"} ", count, "\n");
  }
  return out;
}

}  // namespace tpserve
