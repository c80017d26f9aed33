#include "coordinator/metrics.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <ostream>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::Contains;
using ::testing::Not;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

// Checks `text` against format 0.0.4 as Prometheus reads it: every line a comment, empty or
// `name{labels} value`; one HELP and one TYPE per family, before its samples; a family's samples
// contiguous; every sample named by its family's TYPE (histograms: _bucket, _sum, _count).
// Returns the problems found, empty when none.
std::vector<std::string> FormatProblems(const std::string& text) {
  static const std::regex kSample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*))"
                                  R"((\{[a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^"\\\n])*")"
                                  R"((,[a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^"\\\n])*")*\})?)"
                                  R"( ([-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|[-+]Inf|NaN)$)");
  static const std::regex kHelp(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*$)");
  static const std::regex kType(
      R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  std::vector<std::string> problems;
  if (text.empty() || text.back() != '\n') problems.push_back("does not end in a newline");
  std::set<std::string> helped, typed;
  std::string family, family_type;  // the last TYPE line's
  std::set<std::string> finished;   // families whose samples are behind us
  for (const std::string& line : Lines(text)) {
    std::smatch match;
    if (line.empty()) continue;
    if (std::regex_match(line, match, kHelp)) {
      if (!helped.insert(match[1]).second) problems.push_back("second HELP: " + line);
    } else if (std::regex_match(line, match, kType)) {
      if (!typed.insert(match[1]).second) problems.push_back("second TYPE: " + line);
      if (!helped.count(match[1])) problems.push_back("TYPE before its HELP: " + line);
      if (!family.empty()) finished.insert(family);
      family = match[1];
      family_type = match[2];
    } else if (line[0] == '#') {
      problems.push_back("unexpected comment: " + line);
    } else if (std::regex_match(line, match, kSample)) {
      const std::string name = match[1];
      bool in_family = name == family;
      if (family_type == "histogram") {
        in_family =
            name == family + "_bucket" || name == family + "_sum" || name == family + "_count";
      }
      if (!in_family) problems.push_back("sample outside its TYPE'd family: " + line);
      if (finished.count(name)) problems.push_back("family interleaved: " + line);
    } else {
      problems.push_back("malformed: " + line);
    }
  }
  return problems;
}

// What a scenario does to a fresh Metrics("m"), and lines its rendering must hold exactly.
struct Scenario {
  std::string name;
  std::string model_name = "m";
  std::function<void(Metrics&)> record;
  std::vector<std::string> expected_lines;
  std::vector<std::string> absent_lines;
};

const char kTtft[] = "tpserve:time_to_first_token_seconds";

// `counts`: the cumulative count at each of the 22 TTFT bounds, then at +Inf.
std::vector<std::string> TtftBuckets(const std::vector<int64_t>& counts) {
  static const char* kLe[] = {"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1",
                              "0.25",  "0.5",   "0.75", "1",    "2.5",  "5",    "7.5",  "10",
                              "20",    "40",    "80",   "160",  "640",  "2560", "+Inf"};
  EXPECT_EQ(counts.size(), std::size(kLe));
  std::vector<std::string> lines;
  for (size_t i = 0; i < counts.size() && i < std::size(kLe); ++i) {
    lines.push_back(std::string(kTtft) + "_bucket{model_name=\"m\",le=\"" + kLe[i] + "\"} " +
                    std::to_string(counts[i]));
  }
  return lines;
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<Scenario>& Scenarios() {
  static const auto* scenarios = new std::vector<Scenario>{
      {"NothingRecordedRendersEveryFamilyAtZero",
       "m",
       [](Metrics&) {},
       Concat(TtftBuckets(std::vector<int64_t>(23, 0)),
              {
                  "# HELP tpserve:time_to_first_token_seconds Histogram of time to first token "
                  "in seconds.",
                  "# TYPE tpserve:time_to_first_token_seconds histogram",
                  "tpserve:time_to_first_token_seconds_sum{model_name=\"m\"} 0",
                  "tpserve:time_to_first_token_seconds_count{model_name=\"m\"} 0",
                  "# TYPE tpserve:inter_token_latency_seconds histogram",
                  "tpserve:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"0.01\"} 0",
                  "tpserve:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"80\"} 0",
                  "tpserve:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 0",
                  "# TYPE tpserve:e2e_request_latency_seconds histogram",
                  "tpserve:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"0.3\"} 0",
                  "tpserve:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"7680\"} 0",
                  "# TYPE tpserve:request_queue_time_seconds histogram",
                  "tpserve:request_queue_time_seconds_count{model_name=\"m\"} 0",
                  "# TYPE tpserve:num_requests_running gauge",
                  "tpserve:num_requests_running{model_name=\"m\"} 0",
                  "# TYPE tpserve:num_requests_waiting gauge",
                  "tpserve:num_requests_waiting{model_name=\"m\"} 0",
                  "# TYPE tpserve:kv_cache_usage_perc gauge",
                  "tpserve:kv_cache_usage_perc{model_name=\"m\"} 0",
                  "# HELP tpserve:prompt_tokens_total Number of prefill tokens processed.",
                  "# TYPE tpserve:prompt_tokens_total counter",
                  "tpserve:prompt_tokens_total{model_name=\"m\"} 0",
                  "# TYPE tpserve:generation_tokens_total counter",
                  "tpserve:generation_tokens_total{model_name=\"m\"} 0",
                  "# TYPE tpserve:prefix_cache_queries_total counter",
                  "tpserve:prefix_cache_queries_total{model_name=\"m\"} 0",
                  "# TYPE tpserve:prefix_cache_hits_total counter",
                  "tpserve:prefix_cache_hits_total{model_name=\"m\"} 0",
                  "# TYPE tpserve:num_preemptions_total counter",
                  "tpserve:num_preemptions_total{model_name=\"m\"} 0",
                  "# TYPE tpserve:request_success_total counter",
                  "tpserve:request_success_total{model_name=\"m\",finished_reason=\"abort\"} 0",
                  "tpserve:request_success_total{model_name=\"m\",finished_reason=\"length\"} 0",
                  "tpserve:request_success_total{model_name=\"m\",finished_reason=\"stop\"} 0",
                  "# TYPE tpserve:auth_failures_total counter",
                  "tpserve:auth_failures_total{model_name=\"m\",surface=\"admin\"} 0",
                  "tpserve:auth_failures_total{model_name=\"m\",surface=\"cluster\"} 0",
                  "tpserve:auth_failures_total{model_name=\"m\",surface=\"http\"} 0",
                  "tpserve:auth_failures_total{model_name=\"m\",surface=\"inference\"} 0",
              }),
       {}},
      {"TtftBucketsAreCumulative",
       "m",
       [](Metrics& m) {
         m.ObserveTimeToFirstToken(0.003);
         m.ObserveTimeToFirstToken(0.07);
       },
       Concat(TtftBuckets({0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}),
              {
                  // The shortest text that reads back as the double 0.003 + 0.07.
                  "tpserve:time_to_first_token_seconds_sum{model_name=\"m\"} 0.07300000000000001",
                  "tpserve:time_to_first_token_seconds_count{model_name=\"m\"} 2",
              }),
       {}},
      {"BoundsAreInclusiveAndLargeValuesLandInInf",
       "m",
       [](Metrics& m) {
         m.ObserveTimeToFirstToken(0.001);
         m.ObserveTimeToFirstToken(2560);
         m.ObserveTimeToFirstToken(3000);
         m.ObserveInterTokenLatency(0.5);
         m.ObserveInterTokenLatency(0.5);
         m.ObserveInterTokenLatency(100);
       },
       Concat(TtftBuckets({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 3}),
              {
                  "tpserve:time_to_first_token_seconds_sum{model_name=\"m\"} 5560.001",
                  "tpserve:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"0.4\"} 0",
                  "tpserve:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"0.5\"} 2",
                  "tpserve:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"80\"} 2",
                  "tpserve:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 3",
                  "tpserve:inter_token_latency_seconds_sum{model_name=\"m\"} 101",
                  "tpserve:inter_token_latency_seconds_count{model_name=\"m\"} 3",
              }),
       {}},
      {"E2eAndQueueTimeUseTheRequestBounds",
       "m",
       [](Metrics& m) {
         m.ObserveE2eRequestLatency(7680);
         m.ObserveE2eRequestLatency(1e4);
         m.ObserveRequestQueueTime(0.25);
       },
       {
           "tpserve:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"1920\"} 0",
           "tpserve:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"7680\"} 1",
           "tpserve:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 2",
           "tpserve:e2e_request_latency_seconds_sum{model_name=\"m\"} 17680",
           "tpserve:e2e_request_latency_seconds_count{model_name=\"m\"} 2",
           "tpserve:request_queue_time_seconds_bucket{model_name=\"m\",le=\"0.3\"} 1",
           "tpserve:request_queue_time_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 1",
           "tpserve:request_queue_time_seconds_sum{model_name=\"m\"} 0.25",
           // Only the queue histogram saw it.
           "tpserve:time_to_first_token_seconds_count{model_name=\"m\"} 0",
       },
       {}},
      {"NanObservationsAreDropped",
       "m",
       [](Metrics& m) {
         m.ObserveTimeToFirstToken(std::numeric_limits<double>::quiet_NaN());
         m.ObserveTimeToFirstToken(0.5);
       },
       {
           "tpserve:time_to_first_token_seconds_sum{model_name=\"m\"} 0.5",
           "tpserve:time_to_first_token_seconds_count{model_name=\"m\"} 1",
           "tpserve:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 1",
       },
       {}},
      {"CountersAddUpAndPrintAsIntegers",
       "m",
       [](Metrics& m) {
         m.AddPromptTokens(10);
         m.AddPromptTokens(32);
         m.AddPromptTokens(0);
         m.AddGenerationTokens(1'000'000'000'000);
         m.AddRequestSuccess("stop");
         m.AddRequestSuccess("length");
         m.AddRequestSuccess("stop");
         m.AddRequestSuccess("error");
       },
       {
           "tpserve:prompt_tokens_total{model_name=\"m\"} 42",
           "tpserve:generation_tokens_total{model_name=\"m\"} 1000000000000",
           "tpserve:request_success_total{model_name=\"m\",finished_reason=\"abort\"} 0",
           "tpserve:request_success_total{model_name=\"m\",finished_reason=\"error\"} 1",
           "tpserve:request_success_total{model_name=\"m\",finished_reason=\"length\"} 1",
           "tpserve:request_success_total{model_name=\"m\",finished_reason=\"stop\"} 2",
       },
       {}},
      {"AuthFailuresCountPerSurface",
       "m",
       [](Metrics& m) {
         m.AddAuthFailure("http");
         m.AddAuthFailure("cluster");
         m.AddAuthFailure("http");
       },
       {
           "tpserve:auth_failures_total{model_name=\"m\",surface=\"admin\"} 0",
           "tpserve:auth_failures_total{model_name=\"m\",surface=\"cluster\"} 1",
           "tpserve:auth_failures_total{model_name=\"m\",surface=\"http\"} 2",
           "tpserve:auth_failures_total{model_name=\"m\",surface=\"inference\"} 0",
       },
       {}},
      {"EngineStateIsAbsoluteNotAdded",
       "m",
       [](Metrics& m) {
         m.SetEngineState({3, 7, 0.25, 5, 1000, 640, 40, 9, 30, 21, {}});
         m.SetEngineState({2, 0, 0.5, 6, 1200, 700, 52, 10, 34, 22, {}});
       },
       {
           "tpserve:num_requests_running{model_name=\"m\"} 2",
           "tpserve:num_requests_waiting{model_name=\"m\"} 0",
           "tpserve:kv_cache_usage_perc{model_name=\"m\"} 0.5",
           "tpserve:num_preemptions_total{model_name=\"m\"} 6",
           "tpserve:prefix_cache_queries_total{model_name=\"m\"} 1200",
           "tpserve:prefix_cache_hits_total{model_name=\"m\"} 700",
           "tpserve:jump_forward_tokens_total{model_name=\"m\"} 52",
           "tpserve:spec_decode_num_drafts_total{model_name=\"m\"} 10",
           "tpserve:spec_decode_num_draft_tokens_total{model_name=\"m\"} 34",
           "tpserve:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 22",
       },
       {
           "tpserve:num_preemptions_total{model_name=\"m\"} 11",
           "tpserve:jump_forward_tokens_total{model_name=\"m\"} 92",
       }},
      {"HeldRequestsAndRecoveries",
       "m",
       [](Metrics& m) {
         EngineState state;
         state.num_held = 16;
         state.requests_held = 20;
         state.requests_resumed = 4;
         state.recoveries = 1;
         m.SetEngineState(state);
         m.ObserveRecoveryTime(2.2);
         m.ObserveRecoveryTime(45);
       },
       {
           "tpserve:num_requests_held{model_name=\"m\"} 16",
           "tpserve:requests_held_total{model_name=\"m\"} 20",
           "tpserve:requests_resumed_total{model_name=\"m\"} 4",
           "tpserve:recoveries_total{model_name=\"m\"} 1",
           "tpserve:recovery_duration_seconds_bucket{model_name=\"m\",le=\"2\"} 0",
           "tpserve:recovery_duration_seconds_bucket{model_name=\"m\",le=\"2.5\"} 1",
           "tpserve:recovery_duration_seconds_bucket{model_name=\"m\",le=\"40\"} 1",
           "tpserve:recovery_duration_seconds_bucket{model_name=\"m\",le=\"50\"} 2",
           "tpserve:recovery_duration_seconds_sum{model_name=\"m\"} 47.2",
           "tpserve:recovery_duration_seconds_count{model_name=\"m\"} 2",
       },
       {}},
      {"AcceptanceLengthsAsHistogramAndPerPosition",
       "m",
       [](Metrics& m) {
         // K = 3: three runs accepted none, one accepted 1, two accepted all 3.
         m.SetEngineState({0, 0, 0, 0, 0, 0, 0, 6, 18, 7, {3, 1, 0, 2}});
       },
       {
           "tpserve:spec_decode_acceptance_length_bucket{model_name=\"m\",le=\"0\"} 3",
           "tpserve:spec_decode_acceptance_length_bucket{model_name=\"m\",le=\"1\"} 4",
           "tpserve:spec_decode_acceptance_length_bucket{model_name=\"m\",le=\"2\"} 4",
           "tpserve:spec_decode_acceptance_length_bucket{model_name=\"m\",le=\"+Inf\"} 6",
           "tpserve:spec_decode_acceptance_length_sum{model_name=\"m\"} 7",
           "tpserve:spec_decode_acceptance_length_count{model_name=\"m\"} 6",
           "tpserve:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} "
           "3",
           "tpserve:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"1\"} "
           "2",
           "tpserve:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"2\"} "
           "2",
       },
       {
           "tpserve:spec_decode_acceptance_length_bucket{model_name=\"m\",le=\"3\"} 6",
           "tpserve:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"3\"} "
           "0",
       }},
      {"NoSpeculationNoAcceptanceMetrics",
       "m",
       [](Metrics& m) {
         m.SetEngineState({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, {}});
       },
       {"tpserve:spec_decode_num_drafts_total{model_name=\"m\"} 0"},
       {"# TYPE tpserve:spec_decode_acceptance_length histogram"}},
      {"KvCacheUsagePrintsShortest",
       "m",
       [](Metrics& m) {
         m.SetEngineState({0, 0, 0.1, 0, 0, 0, 0, 0, 0, 0, {}});
       },
       {"tpserve:kv_cache_usage_perc{model_name=\"m\"} 0.1"},
       {}},
      {"LabelValuesAreEscaped",
       "dir\\name \"q\"\nx",
       [](Metrics& m) {
         m.SetEngineState({1, 0, 0, 0, 0, 0, 0, 0, 0, 0, {}});
         m.AddRequestSuccess("a\"b\\c\nd");
       },
       {
           R"(tpserve:num_requests_running{model_name="dir\\name \"q\"\nx"} 1)",
           R"(tpserve:request_success_total{model_name="dir\\name \"q\"\nx",)"
           R"(finished_reason="a\"b\\c\nd"} 1)",
           R"(tpserve:time_to_first_token_seconds_bucket{model_name="dir\\name \"q\"\nx",)"
           R"(le="+Inf"} 0)",
       },
       {}},
  };
  return *scenarios;
}

// gtest prints a failing parameter with this; the default is a byte dump.
void PrintTo(const Scenario& scenario, std::ostream* os) { *os << scenario.name; }

class MetricsScenario : public ::testing::TestWithParam<Scenario> {};

TEST_P(MetricsScenario, RendersTheExpectedLinesInValidFormat) {
  const Scenario& scenario = GetParam();
  Metrics metrics(scenario.model_name);
  scenario.record(metrics);
  const std::string text = metrics.RenderPrometheus();
  const std::vector<std::string> lines = Lines(text);
  for (const std::string& expected : scenario.expected_lines) {
    EXPECT_THAT(lines, Contains(expected)) << "missing: " << expected;
  }
  for (const std::string& absent : scenario.absent_lines) {
    EXPECT_THAT(lines, Not(Contains(absent)));
  }
  EXPECT_THAT(FormatProblems(text), testing::IsEmpty()) << text;
}

INSTANTIATE_TEST_SUITE_P(Tables, MetricsScenario, ::testing::ValuesIn(Scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           return info.param.name;
                         });

TEST(MetricsTest, EveryFamilyHasItsSamples) {
  Metrics metrics("m");
  std::map<std::string, int> samples;  // sample name -> lines
  for (const std::string& line : Lines(metrics.RenderPrometheus())) {
    if (line.empty() || line[0] == '#') continue;
    ++samples[line.substr(0, line.find('{'))];
  }
  const std::map<std::string, int> expected = {
      {"tpserve:time_to_first_token_seconds_bucket", 23},
      {"tpserve:time_to_first_token_seconds_sum", 1},
      {"tpserve:time_to_first_token_seconds_count", 1},
      {"tpserve:inter_token_latency_seconds_bucket", 20},
      {"tpserve:inter_token_latency_seconds_sum", 1},
      {"tpserve:inter_token_latency_seconds_count", 1},
      {"tpserve:e2e_request_latency_seconds_bucket", 22},
      {"tpserve:e2e_request_latency_seconds_sum", 1},
      {"tpserve:e2e_request_latency_seconds_count", 1},
      {"tpserve:request_queue_time_seconds_bucket", 22},
      {"tpserve:request_queue_time_seconds_sum", 1},
      {"tpserve:request_queue_time_seconds_count", 1},
      {"tpserve:recovery_duration_seconds_bucket", 22},
      {"tpserve:recovery_duration_seconds_sum", 1},
      {"tpserve:recovery_duration_seconds_count", 1},
      {"tpserve:token_delivery_seconds_bucket", 21},
      {"tpserve:token_delivery_seconds_sum", 1},
      {"tpserve:token_delivery_seconds_count", 1},
      {"tpserve:num_requests_held", 1},
      {"tpserve:cluster_degraded", 1},
      {"tpserve:requests_held_total", 1},
      {"tpserve:requests_resumed_total", 1},
      {"tpserve:recoveries_total", 1},
      {"tpserve:num_requests_running", 1},
      {"tpserve:num_requests_waiting", 1},
      {"tpserve:kv_cache_usage_perc", 1},
      {"tpserve:prompt_tokens_total", 1},
      {"tpserve:generation_tokens_total", 1},
      {"tpserve:prefix_cache_queries_total", 1},
      {"tpserve:prefix_cache_hits_total", 1},
      {"tpserve:num_preemptions_total", 1},
      {"tpserve:jump_forward_tokens_total", 1},
      {"tpserve:spec_decode_num_drafts_total", 1},
      {"tpserve:spec_decode_num_draft_tokens_total", 1},
      {"tpserve:spec_decode_num_accepted_tokens_total", 1},
      {"tpserve:request_success_total", 3},
      {"tpserve:auth_failures_total", 4},
  };
  EXPECT_EQ(samples, expected);
}

// --metrics-names vllm: the series vLLM has under its names, tpserve's own under tpserve:, and the
// KV cache's shape in cache_config_info once it is known.
TEST(MetricsTest, VllmNamesForTheSeriesVllmHas) {
  Metrics metrics("m", MetricNames::kVllm);
  EngineState state;
  state.num_waiting = 3;
  state.kv_cache_usage = 0.25;
  state.spec_acceptance_lengths = {1, 2};
  metrics.SetEngineState(state);
  EXPECT_THAT(metrics.RenderPrometheus(), Not(::testing::HasSubstr("cache_config_info")));
  metrics.SetCacheConfig(16, 4096, true);
  const std::string text = metrics.RenderPrometheus();
  EXPECT_THAT(FormatProblems(text), ::testing::IsEmpty());
  const std::vector<std::string> lines = Lines(text);
  for (const char* line :
       {"vllm:num_requests_waiting{model_name=\"m\"} 3",
        "vllm:num_requests_running{model_name=\"m\"} 0",
        "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25",
        "vllm:cache_config_info{model_name=\"m\",block_size=\"16\",num_gpu_blocks=\"4096\","
        "enable_prefix_caching=\"True\"} 1",
        "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 0",
        "vllm:request_success_total{model_name=\"m\",finished_reason=\"stop\"} 0",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 2",
        "tpserve:recoveries_total{model_name=\"m\"} 0",
        "tpserve:spec_decode_acceptance_length_count{model_name=\"m\"} 3"}) {
    EXPECT_THAT(lines, Contains(line));
  }
  for (const std::string& line : lines) {
    if (line.empty() || line[0] == '#' || line.rfind("vllm:", 0) == 0) continue;
    EXPECT_EQ(line.rfind("tpserve:", 0), 0u) << line;
    EXPECT_EQ(line.find("tpserve:num_requests_waiting"), std::string::npos) << "named twice";
  }
}

TEST(MetricsTest, FormatCheckerCatchesBadLines) {
  // The checker must reject what the scenarios rely on it to reject.
  EXPECT_THAT(FormatProblems("# HELP a x\n# TYPE a gauge\na 1\n"), testing::IsEmpty());
  EXPECT_THAT(FormatProblems("# HELP a x\n# TYPE a gauge\na 1"), Not(testing::IsEmpty()));
  EXPECT_THAT(FormatProblems("# HELP a x\n# TYPE a gauge\na{l=\"x\"y\"} 1\n"),
              Not(testing::IsEmpty()));
  EXPECT_THAT(FormatProblems("# HELP a x\n# TYPE a counter\na_total 1\n"), Not(testing::IsEmpty()));
  EXPECT_THAT(FormatProblems("# HELP a x\n# TYPE a gauge\na 1\n# HELP a x\n"),
              Not(testing::IsEmpty()));
}

// The engine thread records while HTTP threads render: nothing is lost, and every rendering is
// well-formed.
TEST(MetricsTest, ConcurrentRecordingAddsUp) {
  constexpr int kThreads = 4;
  constexpr int kIterations = 20000;
  Metrics metrics("m");
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics, t] {
      for (int i = 0; i < kIterations; ++i) {
        metrics.ObserveTimeToFirstToken(0.25);  // sums of 0.25 and 0.5 are exact in a double
        metrics.ObserveInterTokenLatency(0.5);
        metrics.ObserveE2eRequestLatency(1.0);
        metrics.ObserveRequestQueueTime(0.5);
        metrics.AddPromptTokens(1);
        metrics.AddGenerationTokens(2);
        metrics.AddRequestSuccess(i % 2 == 0 ? "stop" : "length");
        metrics.SetEngineState({t, i, 0.5, i, i, i, i, i, i, i, {}});
      }
    });
  }
  std::thread reader([&metrics] {
    for (int i = 0; i < 50; ++i) {
      const std::string text = metrics.RenderPrometheus();
      ASSERT_THAT(FormatProblems(text), testing::IsEmpty()) << text;
    }
  });
  for (std::thread& thread : threads) thread.join();
  reader.join();

  constexpr int64_t kTotal = int64_t{kThreads} * kIterations;
  const std::vector<std::string> lines = Lines(metrics.RenderPrometheus());
  const std::string total = std::to_string(kTotal);
  for (const std::string& expected : std::vector<std::string>{
           "tpserve:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.1\"} 0",
           "tpserve:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.25\"} " + total,
           "tpserve:time_to_first_token_seconds_count{model_name=\"m\"} " + total,
           "tpserve:time_to_first_token_seconds_sum{model_name=\"m\"} " +
               std::to_string(kTotal / 4),
           "tpserve:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"+Inf\"} " + total,
           "tpserve:inter_token_latency_seconds_sum{model_name=\"m\"} " +
               std::to_string(kTotal / 2),
           "tpserve:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"1\"} " + total,
           "tpserve:e2e_request_latency_seconds_sum{model_name=\"m\"} " + total,
           "tpserve:request_queue_time_seconds_count{model_name=\"m\"} " + total,
           "tpserve:prompt_tokens_total{model_name=\"m\"} " + total,
           "tpserve:generation_tokens_total{model_name=\"m\"} " + std::to_string(2 * kTotal),
           "tpserve:request_success_total{model_name=\"m\",finished_reason=\"stop\"} " +
               std::to_string(kTotal / 2),
           "tpserve:request_success_total{model_name=\"m\",finished_reason=\"length\"} " +
               std::to_string(kTotal / 2),
           "tpserve:num_preemptions_total{model_name=\"m\"} " + std::to_string(kIterations - 1),
       }) {
    EXPECT_THAT(lines, Contains(expected));
  }
}

TEST(MetricsDeathTest, CountersNeverGoDown) {
  Metrics metrics("m");
  EXPECT_DEATH(metrics.AddPromptTokens(-1), "n >= 0");
  EXPECT_DEATH(metrics.AddGenerationTokens(-1), "n >= 0");
}

}  // namespace
}  // namespace tpserve
