// tpserve-bench: load generator for the public Generate API. Sends random token-id prompts
// (greedy, EOS ignored, so every request produces exactly its output length) to a running
// coordinator or to a local cluster it starts, then reports throughput, TTFT, inter-token and
// end-to-end latency percentiles, and the prefix-cache hit rate.
//
//   tpserve-bench --coordinator HOST:PORT [workload flags]
//   tpserve-bench --model M.gguf --tp N [--kv-cache-blocks N] [--server-arg=--flag=value ...]
//                 [workload flags]
//   workload: --mode closed --concurrency C | --mode poisson --rate R, --num-requests N,
//             --warmup K, --input-len L, --output-len L, --len-dist fixed|uniform,
//             --shared-prefix-len L, --seed S, --json PATH
//
// Exits 0 when every request succeeded, 1 when any failed or the cluster could not be reached
// or started, 2 for bad flags.
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "bench/serving_report.h"
#include "bench/workload.h"
#include "cli/local_cluster.h"
#include "common/logging.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve::bench {
namespace {

constexpr char kLog[] = "bench";
constexpr int kMaxErrorsShown = 5;
// Random streams (see MakeRequests): warm-up prompts differ from measured ones, shared prefix
// included, so the warm-up never pre-fills the prefix cache for the measured run.
constexpr uint64_t kMeasuredPromptStream = 0;
constexpr uint64_t kWarmupPromptStream = 1;
constexpr uint64_t kMeasuredArrivalStream = 2;
constexpr uint64_t kWarmupArrivalStream = 3;

struct Flags {
  // Target: a running coordinator, or a local cluster started from --model.
  std::string coordinator;
  std::string model;
  int tp = 1;
  int64_t kv_cache_blocks = 0;
  std::vector<std::string> server_args;  // extra coordinator flags
  std::string bin_dir;                   // empty: the directory of this executable
  std::string log_dir;                   // empty: a new directory under /tmp
  int ready_timeout_s = 600;
  // Arrivals.
  std::string mode = "closed";
  int concurrency = 1;
  double rate = 0;  // requests/s
  // Workload.
  int num_requests = 100;
  int warmup = 0;
  std::string len_dist = "fixed";
  WorkloadOptions workload;
  std::string json_path;
  // Structured output: every `constrained_every`-th request (0: none) constrained to this regex,
  // or to the JSON schema in `constraint_json_schema_file` when one is named.
  int constrained_every = 0;
  std::string constraint_regex = "[a-z ,.]+";
  std::string constraint_json_schema_file;
  std::string constraint_json_schema;  // the file's text, read after parsing
  // LoRA: request i runs with models[i % size] ("base": the base model); empty: all base.
  std::vector<std::string> models;
};

// Every --constrained-every-th request gets the constraint; request i the i-th of --models in turn.
std::vector<BenchRequest> Constrain(std::vector<BenchRequest> requests, const Flags& flags) {
  for (size_t i = 0; i < requests.size() && !flags.models.empty(); ++i) {
    const std::string& model = flags.models[i % flags.models.size()];
    requests[i].model = model == "base" ? "" : model;
  }
  if (flags.constrained_every <= 0) return requests;
  for (size_t i = 0; i < requests.size(); i += flags.constrained_every) {
    if (flags.constraint_json_schema.empty()) {
      requests[i].regex = flags.constraint_regex;
    } else {
      requests[i].json_schema = flags.constraint_json_schema;
    }
  }
  return requests;
}

std::string BinaryDir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Sends one phase's requests (the warm-up or the measured run) and records what each saw.
// Result i is written only by the thread that sends request i; the counters are atomics, so
// progress and the first errors are logged from whichever client thread gets there.
class PhaseRunner {
 public:
  PhaseRunner(v1::InferenceService::Stub& stub, std::string name,
              std::vector<BenchRequest> requests, bool log_progress)
      : stub_(stub),
        name_(std::move(name)),
        requests_(std::move(requests)),
        log_progress_(log_progress),
        results_(requests_.size()) {}

  // Closed loop: `concurrency` client threads, each sending its next request when its previous
  // one finishes.
  void RunClosed(int concurrency) {
    start_ = std::chrono::steady_clock::now();
    std::vector<std::thread> clients;
    const int threads = std::min<int>(concurrency, requests_.size());
    for (int i = 0; i < threads; ++i) {
      clients.emplace_back([this] {
        for (size_t next = next_++; next < requests_.size(); next = next_++) Send(next);
      });
    }
    for (std::thread& client : clients) client.join();
  }

  // Open loop: request i is sent at `arrivals_s[i]` on its own thread, however many are still
  // running.
  void RunOpen(const std::vector<double>& arrivals_s) {
    start_ = std::chrono::steady_clock::now();
    std::vector<std::thread> senders;
    for (size_t i = 0; i < requests_.size(); ++i) {
      std::this_thread::sleep_until(start_ +
                                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>(arrivals_s[i])));
      senders.emplace_back([this, i] { Send(i); });
    }
    for (std::thread& sender : senders) sender.join();
  }

  const std::vector<RequestResult>& results() const { return results_; }
  int failed() const { return failed_; }

 private:
  double Now() const { return Seconds(std::chrono::steady_clock::now() - start_); }

  void Send(size_t index) {
    const BenchRequest& request = requests_[index];
    v1::GenerateRequest proto;
    proto.mutable_token_ids()->mutable_ids()->Add(request.prompt.begin(), request.prompt.end());
    proto.set_max_tokens(request.max_tokens);
    proto.set_ignore_eos(true);
    proto.mutable_sampling()->set_temperature(0.0f);
    proto.set_model(request.model);
    if (!request.regex.empty()) proto.mutable_constraint()->set_regex(request.regex);
    if (!request.json_schema.empty()) {
      proto.mutable_constraint()->set_json_schema(request.json_schema);
    }

    RequestResult& result = results_[index];
    grpc::ClientContext context;
    result.start_s = Now();
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_.Generate(&context, proto);
    v1::GenerateResponse chunk;
    double last_token_s = 0;
    while (reader->Read(&chunk)) {
      const double now = Now();
      const int tokens = chunk.token_ids_size();
      if (tokens > 0) {
        if (result.first_token_s < 0) {
          result.first_token_s = now;
          result.itl_s.insert(result.itl_s.end(), tokens - 1, 0.0);
        } else {
          result.itl_s.insert(result.itl_s.end(), tokens, (now - last_token_s) / tokens);
        }
        last_token_s = now;
      }
      if (chunk.has_usage()) result.usage = chunk.usage();
    }
    result.status = reader->Finish();
    result.end_s = Now();

    const int total = static_cast<int>(requests_.size());
    int failed = failed_;
    if (!result.status.ok()) {
      failed = ++failed_;
      if (failed <= kMaxErrorsShown) {
        LogError(
            kLog, "%s request %d failed: %s: %s", name_, index,
            absl::StatusCodeToString(static_cast<absl::StatusCode>(result.status.error_code())),
            result.status.error_message());
      }
    }
    const int done = ++done_;
    if (log_progress_ && done * 10 / total != (done - 1) * 10 / total) {
      LogInfo(kLog, "%d%%: %d/%d requests done, %d failed, %.1f s", done * 100 / total, done, total,
              failed, Now());
    }
  }

  v1::InferenceService::Stub& stub_;
  const std::string name_;
  const std::vector<BenchRequest> requests_;
  const bool log_progress_;
  std::chrono::steady_clock::time_point start_;  // set before any client thread starts
  std::vector<RequestResult> results_;           // [requests_.size()]
  std::atomic<size_t> next_{0};                  // closed loop: the next request to send
  std::atomic<int> done_{0};
  std::atomic<int> failed_{0};
};

void RunPhase(PhaseRunner& runner, const Flags& flags, int count, uint64_t arrival_stream) {
  if (flags.mode == "closed") {
    runner.RunClosed(flags.concurrency);
  } else {
    runner.RunOpen(PoissonArrivals(count, flags.rate, flags.workload.seed, arrival_stream));
  }
}

std::string DescribeTarget(const Flags& flags, const std::string& address) {
  if (flags.model.empty()) return absl::StrCat("coordinator ", address);
  return absl::StrCat("local cluster at ", address, ", tp ", flags.tp, ", ", flags.model);
}

std::string DescribeArrivals(const Flags& flags) {
  if (flags.mode == "closed") return absl::StrCat("closed loop, concurrency ", flags.concurrency);
  return absl::StrCat("Poisson, ", flags.rate, " requests/s");
}

std::string DescribeWorkload(const Flags& flags) {
  const WorkloadOptions& w = flags.workload;
  std::string text = absl::StrCat("input ", w.input_len, ", output ", w.output_len, " tokens (",
                                  flags.len_dist, "), token ids [", w.vocab_min, ", ", w.vocab_max,
                                  "), seed ", w.seed, ", warm-up ", flags.warmup);
  if (w.shared_prefix_len > 0) {
    absl::StrAppend(&text, ", shared prefix ", w.shared_prefix_len, " tokens");
  }
  return text;
}

// The run's settings, printed above the results.
void PrintConfig(const Flags& flags, const std::string& address) {
  std::printf("\n");
  std::printf("target                  %s\n", DescribeTarget(flags, address).c_str());
  if (!flags.server_args.empty()) {
    std::printf("server args             %s\n", absl::StrJoin(flags.server_args, " ").c_str());
  }
  std::printf("arrivals                %s\n", DescribeArrivals(flags).c_str());
  std::printf("workload                %s\n", DescribeWorkload(flags).c_str());
}

nlohmann::json ConfigJson(const Flags& flags, const std::string& address) {
  const WorkloadOptions& w = flags.workload;
  nlohmann::json config = {
      {"target", flags.model.empty() ? "coordinator" : "local_cluster"},
      {"address", address},
      {"mode", flags.mode},
      {"num_requests", flags.num_requests},
      {"warmup", flags.warmup},
      {"input_len", w.input_len},
      {"output_len", w.output_len},
      {"len_dist", flags.len_dist},
      {"shared_prefix_len", w.shared_prefix_len},
      {"vocab_min", w.vocab_min},
      {"vocab_max", w.vocab_max},
      {"seed", w.seed},
  };
  if (flags.mode == "closed") {
    config["concurrency"] = flags.concurrency;
  } else {
    config["rate"] = flags.rate;
  }
  if (!flags.model.empty()) {
    config["model"] = flags.model;
    config["tp"] = flags.tp;
    config["kv_cache_blocks"] = flags.kv_cache_blocks;
    config["server_args"] = flags.server_args;
  }
  return config;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "tpserve-bench: %s\n", message.c_str());
  return 1;
}

// The last lines of every child's log, where a failed start says why.
void PrintLogTails(const std::string& log_dir) {
  constexpr size_t kLines = 5;
  for (const auto& entry : std::filesystem::directory_iterator(log_dir)) {
    std::ifstream in(entry.path());
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
    std::fprintf(stderr, "--- %s\n", entry.path().c_str());
    for (size_t i = lines.size() - std::min(lines.size(), kLines); i < lines.size(); ++i) {
      std::fprintf(stderr, "%s\n", lines[i].c_str());
    }
  }
}

absl::Status CheckServing(v1::InferenceService::Stub& stub, const std::string& address) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::HealthResponse health;
  const grpc::Status status = stub.Health(&context, v1::HealthRequest(), &health);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach coordinator at ", address, ": ", status.error_message()));
  }
  if (health.state() != v1::HealthResponse::STATE_SERVING) {
    return absl::UnavailableError(absl::StrCat("coordinator at ", address, " is not serving (",
                                               v1::HealthResponse::State_Name(health.state()),
                                               "): ", health.message()));
  }
  return absl::OkStatus();
}

// Starts the local cluster of --model and waits until it serves. Sets flags.log_dir when empty.
absl::StatusOr<std::unique_ptr<LocalCluster>> StartLocalCluster(Flags& flags) {
  if (flags.log_dir.empty()) {
    char log_dir[] = "/tmp/tpserve-bench-XXXXXX";
    if (mkdtemp(log_dir) == nullptr) return absl::InternalError("mkdtemp under /tmp failed");
    flags.log_dir = log_dir;
  }
  LocalClusterOptions options;
  options.bin_dir = flags.bin_dir.empty() ? BinaryDir() : flags.bin_dir;
  options.model = flags.model;
  options.world_size = flags.tp;
  options.kv_cache_blocks = flags.kv_cache_blocks;
  options.coordinator_args = flags.server_args;
  options.log_dir = flags.log_dir;
  LogInfo(kLog, "starting a local cluster from %s (tp %d); logs in %s", options.bin_dir, flags.tp,
          flags.log_dir);
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
  absl::Status status = cluster.status();
  if (status.ok()) status = (*cluster)->WaitReady(absl::Seconds(flags.ready_timeout_s));
  if (!status.ok()) {
    PrintLogTails(flags.log_dir);
    return absl::Status(status.code(), absl::StrCat("local cluster: ", status.message(),
                                                    "; logs in ", flags.log_dir));
  }
  return cluster;
}

int Run(Flags flags) {
  flags.workload.len_dist =
      flags.len_dist == "uniform" ? LengthDistribution::kUniform : LengthDistribution::kFixed;
  // Opened first so that a bad path fails before the run rather than after it.
  std::ofstream json_out;
  if (!flags.json_path.empty()) {
    json_out.open(flags.json_path);
    if (!json_out) {
      std::fprintf(stderr, "tpserve-bench: --json: cannot write %s\n", flags.json_path.c_str());
      return 2;
    }
  }
  std::unique_ptr<LocalCluster> cluster;
  std::string address = flags.coordinator;
  if (!flags.model.empty()) {
    absl::StatusOr<std::unique_ptr<LocalCluster>> started = StartLocalCluster(flags);
    if (!started.ok()) return Fail(std::string(started.status().message()));
    cluster = *std::move(started);
    address = cluster->address();
  }
  const std::unique_ptr<v1::InferenceService::Stub> stub = v1::InferenceService::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  if (absl::Status s = CheckServing(*stub, address); !s.ok()) return Fail(std::string(s.message()));
  LogInfo(kLog, "%s serving; %s", address, DescribeArrivals(flags));

  if (flags.warmup > 0) {
    PhaseRunner warmup(
        *stub, "warm-up",
        Constrain(MakeRequests(flags.workload, flags.warmup, kWarmupPromptStream), flags),
        /*log_progress=*/false);
    RunPhase(warmup, flags, flags.warmup, kWarmupArrivalStream);
    if (warmup.failed() > 0) {
      return Fail(absl::StrCat(warmup.failed(), " of ", flags.warmup,
                               " warm-up requests failed; not measuring"));
    }
    LogInfo(kLog, "warm-up: %d requests done", flags.warmup);
  }
  PhaseRunner measured(
      *stub, "measured",
      Constrain(MakeRequests(flags.workload, flags.num_requests, kMeasuredPromptStream), flags),
      /*log_progress=*/true);
  RunPhase(measured, flags, flags.num_requests, kMeasuredArrivalStream);
  const ServingReport report =
      MakeServingReport(measured.results(), flags.workload.shared_prefix_len);
  PrintConfig(flags, address);
  PrintServingReport(report);
  std::fflush(stdout);

  if (json_out.is_open()) {
    nlohmann::json json = ServingReportJson(report);
    json["config"] = ConfigJson(flags, address);
    json_out << json.dump(2) << "\n";
    json_out.close();
    if (!json_out) return Fail(absl::StrCat("--json: cannot write ", flags.json_path));
  }
  if (report.failed > 0) {
    if (cluster != nullptr) {
      if (absl::Status s = cluster->CheckChildren(); !s.ok()) {
        LogError(kLog, "%s; logs in %s", s.message(), flags.log_dir);
      }
    }
    return Fail(absl::StrCat(report.failed, " of ", flags.num_requests, " requests failed"));
  }
  return 0;
}

// Rules that span several flags; the error names the flag at fault.
std::optional<std::string> CheckFlagCombinations(const CLI::App& app, const Flags& flags) {
  if (flags.coordinator.empty() && flags.model.empty()) {
    return "--coordinator or --model: one of them is required";
  }
  if (flags.mode == "closed" && app.count("--rate") > 0) {
    return "--rate: only with --mode poisson";
  }
  if (flags.mode == "poisson" && app.count("--rate") == 0) {
    return "--rate: required with --mode poisson";
  }
  if (flags.mode == "poisson" && app.count("--concurrency") > 0) {
    return "--concurrency: only with --mode closed";
  }
  if (flags.workload.vocab_max <= flags.workload.vocab_min) {
    return absl::StrCat("--vocab-max: must be greater than --vocab-min (", flags.workload.vocab_min,
                        ")");
  }
  return std::nullopt;
}

}  // namespace
}  // namespace tpserve::bench

int main(int argc, char** argv) {
  tpserve::bench::Flags flags;
  tpserve::bench::WorkloadOptions& w = flags.workload;
  CLI::App app{"tpserve-bench: serving load generator for the Generate API"};
  CLI::Option* coordinator =
      app.add_option("--coordinator", flags.coordinator, "benchmark a running cluster HOST:PORT");
  CLI::Option* model = app.add_option("--model", flags.model, "start a local cluster of this GGUF")
                           ->check(CLI::ExistingFile)
                           ->excludes(coordinator);
  app.add_option("--tp", flags.tp, "local cluster: tensor-parallel size")
      ->capture_default_str()
      ->check(CLI::Range(1, 64))
      ->needs(model);
  app.add_option("--kv-cache-blocks", flags.kv_cache_blocks,
                 "local cluster: KV pool size (0 = workers decide)")
      ->check(CLI::NonNegativeNumber)
      ->needs(model);
  app.add_option("--server-arg", flags.server_args,
                 "local cluster: a coordinator flag, as --server-arg=--flag=value (repeatable)")
      ->allow_extra_args(false)
      ->needs(model);
  app.add_option("--bin-dir", flags.bin_dir,
                 "local cluster: directory of tpserve-coordinator and tpserve-worker "
                 "(default: this executable's)")
      ->check(CLI::ExistingDirectory)
      ->needs(model);
  app.add_option("--log-dir", flags.log_dir,
                 "local cluster: directory for child logs (default: a new one under /tmp)")
      ->check(CLI::ExistingDirectory)
      ->needs(model);
  app.add_option("--ready-timeout", flags.ready_timeout_s,
                 "local cluster: seconds to wait for it to serve")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->needs(model);
  app.add_option("--mode", flags.mode, "arrivals: closed (--concurrency) or poisson (--rate)")
      ->capture_default_str()
      ->check(CLI::IsMember({"closed", "poisson"}));
  app.add_option("--concurrency", flags.concurrency, "closed: requests in flight")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--rate", flags.rate, "poisson: mean requests per second")
      ->check(CLI::PositiveNumber);
  app.add_option("--num-requests", flags.num_requests, "measured requests")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--warmup", flags.warmup, "requests sent before measuring, not counted")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--input-len", w.input_len, "prompt tokens (after the shared prefix, if any)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--output-len", w.output_len, "tokens to generate per request")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--len-dist", flags.len_dist,
                 "fixed, or uniform in [len/2, len*3/2] for input and output lengths")
      ->capture_default_str()
      ->check(CLI::IsMember({"fixed", "uniform"}));
  app.add_option("--shared-prefix-len", w.shared_prefix_len,
                 "tokens of one random prefix in front of every prompt")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--vocab-min", w.vocab_min, "smallest prompt token id")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--vocab-max", w.vocab_max,
                 "prompt token ids are below this; keep special tokens out of the range")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", w.seed, "seed for prompts, lengths and arrivals")->capture_default_str();
  app.add_option("--json", flags.json_path, "also write the results as JSON to this file");
  app.add_option("--models", flags.models,
                 "LoRA: the adapters (--lora-modules names; 'base' for the base model) that the "
                 "requests run with in turn")
      ->delimiter(',');
  app.add_option("--constrained-every", flags.constrained_every,
                 "structured output: constrain every K-th request to --constraint-regex (0: none)")
      ->check(CLI::NonNegativeNumber);
  CLI::Option* regex = app.add_option("--constraint-regex", flags.constraint_regex,
                                      "the regex constrained requests' text must match")
                           ->capture_default_str();
  app.add_option("--constraint-json-schema", flags.constraint_json_schema_file,
                 "constrain to the JSON schema in this file instead of --constraint-regex")
      ->check(CLI::ExistingFile)
      ->excludes(regex);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is 0; every flag error exits 2
  }
  if (std::optional<std::string> error = tpserve::bench::CheckFlagCombinations(app, flags)) {
    std::fprintf(stderr, "tpserve-bench: %s\n", error->c_str());
    return 2;
  }
  if (!flags.constraint_json_schema_file.empty()) {
    std::ifstream file(flags.constraint_json_schema_file);
    flags.constraint_json_schema.assign(std::istreambuf_iterator<char>(file),
                                        std::istreambuf_iterator<char>());
    if (!file.good() && !file.eof()) {
      std::fprintf(stderr, "tpserve-bench: --constraint-json-schema: cannot read %s\n",
                   flags.constraint_json_schema_file.c_str());
      return 2;
    }
  }
  return tpserve::bench::Run(std::move(flags));
}
