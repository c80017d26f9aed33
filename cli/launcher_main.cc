// tpserve: starts a coordinator and N workers on this host and supervises them: a worker that
// dies is started again (up to --worker-restarts times in all; the coordinator holds its
// requests meanwhile, see --recovery-grace), and all are stopped on Ctrl-C or when the
// coordinator dies or the restarts run out (saying which process ended and how).
//   tpserve --model M --tp N --device cpu [--http-port P] [--admin-port P] [--prompt "..."]
//           [--once] [--log-file F | -v] [--tls-cert C --tls-key K --tls-ca A]
// Every process's log goes to --log-file (tpserve.log) unless -v streams them to stderr. On
// stdout, two lines that scripts parse (tests/integration/tpserve_cluster.py): once the
// coordinator listens
//   tpserve: gRPC at HOST:PORT; HTTP at HOST:PORT; admin at HOST:PORT[; logs in F]
// with "HTTP off" in place of "HTTP at HOST:PORT" under --http-port -1, and once it serves
//   tpserve: loaded M on N cpu workers: SIZE (100%) in S s; serving
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cli/launcher_console.h"
#include "cli/local_cluster.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "common/tls_flags.h"
#include "coordinator/ngram_flags.h"
#include "coordinator/request_limits.h"
#include "grpcpp/grpcpp.h"
#include "model/chat_template.h"
#include "model/gguf_file.h"
#include "model/hf_folder.h"
#include "tpserve/v1/inference.grpc.pb.h"
#include "worker/cpu_weights.h"

namespace tpserve {
namespace {

std::atomic<int> g_stop_signal{0};

void OnSignal(int signal) { g_stop_signal = signal; }

struct Flags {
  std::string model;
  std::string chat_template;  // passed to the coordinator, and used for --prompt
  std::string sampling_defaults = "model";
  int tp = 1;
  std::string device = "cpu";
  double gpu_memory_utilization = 0.9;
  std::string cpu_weights = "auto";
  bool enforce_eager = false;
  std::string host = "127.0.0.1";
  int port = 0;
  int http_port = 8000;  // -1: off
  int admin_port = 0;
  TlsFiles tls;
  std::string served_model_name;
  int max_queued_requests = 0;
  // The coordinator's HTTP limits; 0: its defaults.
  int http_max_connections = 0;
  int64_t http_max_body_bytes = 0;
  double http_header_timeout_s = 0;
  int64_t kv_cache_blocks = 0;
  std::string kv_cache_dtype = "auto";
  std::string quantization = "none";
  int block_size = 16;
  int max_num_batched_tokens = 2048;
  int max_num_seqs = 256;
  double step_timeout_s = 30;
  double heartbeat_interval_s = 1;
  double recovery_grace_s = 60;
  int worker_restarts = 5;
  int64_t max_step_attention = int64_t{2048} * 2048;
  std::vector<std::string> api_keys;
  std::string admin_key_file;
  bool no_prefix_cache = false;
  bool no_jump_forward = false;
  std::string speculative = "none";
  std::string draft_model;
  int self_spec_layers = 0;
  int num_speculative_tokens = 4;
  int spec_disable_batch_size = 8;
  double spec_min_acceptance = 0.2;
  NgramOptions ngram;
  RequestLimits limits;
  int ready_timeout_s = 600;
  std::string prompt;
  int max_tokens = 64;
  bool once = false;
  std::string log_file = "tpserve.log";
  bool verbose = false;  // the logs on stderr instead of log_file
};

std::string BinaryDir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

absl::Status AnswerPrompt(const Flags& flags, const Console& console, LocalCluster& cluster) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, OpenModel(flags.model));
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(*file));
  ASSIGN_OR_RETURN(const ChatTemplate chat_template,
                   ChatTemplate::Load(*file, *tokenizer, flags.chat_template));
  ASSIGN_OR_RETURN(std::string text, chat_template.ApplyUserPrompt(flags.prompt));
  v1::GenerateRequest request;
  request.set_text(std::move(text));
  request.set_max_tokens(flags.max_tokens);
  request.mutable_sampling()->set_temperature(0.0f);
  grpc::ClientContext context;
  // The sample prompt is a client like any other: it shows one of the cluster's API keys.
  if (const char* keys = std::getenv("TPSERVE_API_KEY"); keys != nullptr) {
    const std::string all(keys);
    const std::string first(absl::StripAsciiWhitespace(all.substr(0, all.find('\n'))));
    if (!first.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", first));
  }
  auto reader = cluster.inference().Generate(&context, request);
  v1::GenerateResponse chunk;
  std::fprintf(console.out, "> %s\n", flags.prompt.c_str());
  while (reader->Read(&chunk)) {
    std::fwrite(chunk.text().data(), 1, chunk.text().size(), console.out);
    std::fflush(console.out);
  }
  std::fprintf(console.out, "\n");
  const grpc::Status status = reader->Finish();
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("Generate failed: ", status.error_message()));
  }
  return absl::OkStatus();
}

// Starts again, as a supervisor (Kubernetes) would, the workers that have ended while the
// coordinator runs, while `restarts` last. Returns OK on Ctrl-C / SIGTERM, or the error naming
// the child that ended once none may be restarted.
absl::Status Supervise(LocalCluster& cluster, int world_size, int restarts) {
  while (g_stop_signal == 0) {
    for (int rank = 0; rank < world_size && restarts > 0; ++rank) {
      if (cluster.coordinator().Poll().has_value()) break;
      const std::optional<int> status = cluster.worker(rank)->Poll();
      if (!status.has_value()) continue;
      --restarts;
      LogWarning("tpserve",
                 "the worker of rank %d (pid %d) %s: starting it again (%d restarts left)", rank,
                 cluster.worker(rank)->pid(), DescribeWaitStatus(*status), restarts);
      RETURN_IF_ERROR(cluster.RestartWorker(rank));
    }
    RETURN_IF_ERROR(cluster.CheckChildren());
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::OkStatus();
}

absl::Status Serve(const Flags& flags, const Console& console) {
  LocalClusterOptions options;
  options.bin_dir = BinaryDir();
  options.model = flags.model;
  options.world_size = flags.tp;
  options.host = flags.host;
  options.port = flags.port;
  options.http_port = flags.http_port;
  options.admin_port = flags.admin_port;
  options.tls = flags.tls;
  options.kv_cache_blocks = flags.kv_cache_blocks;
  options.coordinator_args = {
      absl::StrCat("--block-size=", flags.block_size),
      absl::StrCat("--max-num-batched-tokens=", flags.max_num_batched_tokens),
      absl::StrCat("--max-num-seqs=", flags.max_num_seqs),
      absl::StrCat("--max-queued-requests=", flags.max_queued_requests),
      absl::StrCat("--step-timeout=", flags.step_timeout_s),
      absl::StrCat("--heartbeat-interval=", flags.heartbeat_interval_s),
      absl::StrCat("--recovery-grace=", flags.recovery_grace_s),
      absl::StrCat("--kv-cache-dtype=", flags.kv_cache_dtype),
      absl::StrCat("--quantization=", flags.quantization),
      absl::StrCat("--max-step-attention=", flags.max_step_attention),
      absl::StrCat("--device=", flags.device)};
  if (!flags.api_keys.empty()) {
    // Through the environment the coordinator inherits, not its argv, which any local user
    // can read in /proc.
    const char* inherited = std::getenv("TPSERVE_API_KEY");
    std::string keys = inherited == nullptr ? "" : absl::StrCat(inherited, "\n");
    absl::StrAppend(&keys, absl::StrJoin(flags.api_keys, "\n"));
    setenv("TPSERVE_API_KEY", keys.c_str(), /*overwrite=*/1);
  }
  if (!flags.admin_key_file.empty()) {
    options.coordinator_args.push_back(absl::StrCat("--admin-key-file=", flags.admin_key_file));
  }
  if (flags.device == "cuda") {
    // On one host, rank r drives GPU r (the workers' default --local-rank).
    options.worker_args.push_back(
        absl::StrCat("--gpu-memory-utilization=", flags.gpu_memory_utilization));
    if (flags.enforce_eager) options.coordinator_args.push_back("--enforce-eager");
  }
  if (flags.device == "cpu") {
    options.worker_args.push_back(absl::StrCat("--cpu-weights=", flags.cpu_weights));
  }
  if (flags.no_prefix_cache) options.coordinator_args.push_back("--no-prefix-cache");
  if (flags.no_jump_forward) options.coordinator_args.push_back("--no-jump-forward");
  options.coordinator_args.push_back(absl::StrCat("--speculative=", flags.speculative));
  if (!flags.draft_model.empty()) {
    options.coordinator_args.push_back(absl::StrCat("--draft-model=", flags.draft_model));
    options.worker_args.push_back(absl::StrCat("--draft-model=", flags.draft_model));
  }
  options.coordinator_args.push_back(absl::StrCat("--self-spec-layers=", flags.self_spec_layers));
  options.coordinator_args.push_back(
      absl::StrCat("--num-speculative-tokens=", flags.num_speculative_tokens));
  options.coordinator_args.push_back(
      absl::StrCat("--spec-disable-batch-size=", flags.spec_disable_batch_size));
  options.coordinator_args.push_back(
      absl::StrCat("--spec-min-acceptance=", flags.spec_min_acceptance));
  options.coordinator_args.push_back(absl::StrCat("--ngram-min=", flags.ngram.min_n));
  options.coordinator_args.push_back(absl::StrCat("--ngram-max=", flags.ngram.max_n));
  for (std::string& arg : RequestLimitArgs(flags.limits)) {
    options.coordinator_args.push_back(std::move(arg));
  }
  if (!flags.chat_template.empty()) {
    options.coordinator_args.push_back(absl::StrCat("--chat-template=", flags.chat_template));
  }
  options.coordinator_args.push_back(absl::StrCat("--sampling-defaults=", flags.sampling_defaults));
  if (flags.http_max_connections > 0) {
    options.coordinator_args.push_back(
        absl::StrCat("--http-max-connections=", flags.http_max_connections));
  }
  if (flags.http_max_body_bytes > 0) {
    options.coordinator_args.push_back(
        absl::StrCat("--http-max-body-bytes=", flags.http_max_body_bytes));
  }
  if (flags.http_header_timeout_s > 0) {
    options.coordinator_args.push_back(
        absl::StrCat("--http-header-timeout=", flags.http_header_timeout_s));
  }
  if (!flags.served_model_name.empty()) {
    options.coordinator_args.push_back(
        absl::StrCat("--served-model-name=", flags.served_model_name));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(options));
  LogInfo("tpserve", "coordinator listening on %s; started %d workers", cluster->address(),
          flags.tp);
  const std::string http = cluster->http_address().empty()
                               ? "HTTP off"
                               : absl::StrCat("HTTP at ", cluster->http_address());
  const std::string logs =
      console.log_file.empty() ? "" : absl::StrCat("; logs in ", console.log_file);
  std::fprintf(console.out, "tpserve: gRPC at %s; %s; admin at %s%s\n", cluster->address().c_str(),
               http.c_str(), cluster->admin_address().c_str(), logs.c_str());
  std::fflush(console.out);
  LoadProgressLine progress(console, absl::StrCat(flags.model, " on ", flags.tp, " ", flags.device,
                                                  flags.tp == 1 ? " worker" : " workers"));
  RETURN_IF_ERROR(cluster->WaitReady(absl::Seconds(flags.ready_timeout_s),
                                     [&](const v1::HealthResponse& h) { progress.Update(h); }));
  // Until now the default handlers apply: a signal kills this process and PR_SET_PDEATHSIG
  // takes the children with it. From here on, a signal stops the cluster in order.
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  progress.Done();
  if (!flags.prompt.empty()) RETURN_IF_ERROR(AnswerPrompt(flags, console, *cluster));
  if (flags.once) return absl::OkStatus();
  std::fprintf(console.out, "tpserve: Ctrl-C stops the cluster\n");
  std::fflush(console.out);
  return Supervise(*cluster, flags.tp, flags.worker_restarts);
}

int Run(const Flags& flags) {
  Console console;
  if (!flags.verbose) {
    absl::StatusOr<Console> redirected = RedirectLogs(flags.log_file);
    if (!redirected.ok()) {
      std::fprintf(stderr, "tpserve: %s\n", std::string(redirected.status().message()).c_str());
      return 1;
    }
    console = *redirected;
  }
  const absl::Status status = Serve(flags, console);
  const std::string logs =
      console.log_file.empty() ? "" : absl::StrCat(" (logs in ", console.log_file, ")");
  if (!status.ok()) {
    std::fprintf(console.err, "tpserve: %s; stopped every process%s\n",
                 std::string(status.message()).c_str(), logs.c_str());
    return 1;
  }
  std::fprintf(console.err, "tpserve: stopped\n");
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::Flags flags;
  CLI::App app{"Start a local tpserve cluster: a coordinator and --tp workers"};
  app.add_option("--model", flags.model, "GGUF model file or Hugging Face folder")
      ->required()
      ->check(CLI::ExistingPath);
  app.add_option("--chat-template", flags.chat_template,
                 "Jinja chat template file to use instead of the model's tokenizer.chat_template")
      ->check(CLI::ExistingFile);
  app.add_option("--sampling-defaults", flags.sampling_defaults,
                 "what a request's absent sampling fields take: 'model' (the model's recommended "
                 "sampling) or 'builtin' (temperature 1, every filter off)")
      ->check(CLI::IsMember({"model", "builtin"}))
      ->capture_default_str();
  app.add_option("--tp", flags.tp, "tensor-parallel size (number of workers)")
      ->check(CLI::Range(1, 64));
  app.add_option("--device", flags.device, "cpu or cuda (rank r on GPU r)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option(
         "--cpu-weights", flags.cpu_weights,
         "CPU: how weights in GGUF blocks are held and multiplied. packed: their own bytes, "
         "activations rounded to 8 bits per block (as llama.cpp); packed-a16: the same, "
         "activations at 16 bits (twice the integer work, within 1e-7 KL of fp32); fp32: "
         "decoded at load, products in fp32 (4-8x the memory, slower); auto: packed-a16 "
         "below 1B parameters, packed above")
      ->capture_default_str()
      ->check(CLI::IsMember(tpserve::CpuWeightsNames()));
  app.add_option("--gpu-memory-utilization", flags.gpu_memory_utilization,
                 "cuda: share of each GPU's memory for weights, buffers and the KV pool")
      ->check(CLI::Range(0.05, 1.0));
  app.add_flag("--enforce-eager", flags.enforce_eager, "cuda: no decode CUDA graphs");
  app.add_option("--host", flags.host, "address to listen on");
  app.add_option("--port", flags.port, "coordinator port (0 = any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--http-port", flags.http_port,
                 "OpenAI-compatible HTTP API port (0 = any free port, -1 = off)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65535));
  app.add_option("--admin-port", flags.admin_port,
                 "the coordinator's AdminService port, for tpctl (0 = any free port)")
      ->check(CLI::Range(0, 65535));
  tpserve::AddTlsFlags(app, &flags.tls);
  app.add_option("--served-model-name", flags.served_model_name,
                 "model name for OpenAI requests (default: the model file's name without .gguf)");
  app.add_option("--max-queued-requests", flags.max_queued_requests,
                 "waiting requests beyond which new ones get HTTP 429 (0 = no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--http-max-connections", flags.http_max_connections,
                 "open HTTP connections beyond which new ones get 503 (0 = the coordinator's "
                 "default, 2048)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--http-max-body-bytes", flags.http_max_body_bytes,
                 "largest HTTP request body; larger ones get 413 (0 = the default, 8 MiB)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--http-header-timeout", flags.http_header_timeout_s,
                 "seconds a request head may take to arrive (0 = the default, 10)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-cache-dtype", flags.kv_cache_dtype,
                 "auto (fp32 on CPU, bf16 on CUDA) or fp8 (E4M3 codes, on either)")
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3"}));
  app.add_option("--quantization", flags.quantization,
                 "none, or fp8 (FP8 W8A8 linears, quantized at load; CUDA workers)")
      ->check(CLI::IsMember({"none", "fp8"}));
  app.add_option("--kv-cache-blocks", flags.kv_cache_blocks, "KV pool size (0 = workers decide)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--block-size", flags.block_size, "tokens per KV block")
      ->check(CLI::Range(1, 1024));
  app.add_option("--max-num-batched-tokens", flags.max_num_batched_tokens,
                 "tokens run per step: decodes plus prefill chunks")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-num-seqs", flags.max_num_seqs, "sequences running at once")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--step-timeout", flags.step_timeout_s,
                 "the least seconds a step may take before the cluster is degraded (longer "
                 "steps get proportionally more)")
      ->check(CLI::PositiveNumber);
  app.add_option("--heartbeat-interval", flags.heartbeat_interval_s,
                 "seconds between heartbeats; a rank silent for half of one fails the step in "
                 "flight")
      ->check(CLI::Range(0.05, 60.0));
  app.add_option("--recovery-grace", flags.recovery_grace_s,
                 "seconds requests in flight are held after a worker is lost, waiting for it to "
                 "come back, before they fail; 0 = they fail at once")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--worker-restarts", flags.worker_restarts,
                 "times in all a worker that dies is started again; 0 = a worker's death stops "
                 "the cluster")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-step-attention", flags.max_step_attention,
                 "attention work per step (tokens times their context): long prompts run as "
                 "more, shorter steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  app.add_option("--api-key", flags.api_keys,
                 "a key clients must send as 'Authorization: Bearer' (repeatable; added to "
                 "$TPSERVE_API_KEY, which the coordinator inherits)");
  app.add_option("--admin-key-file", flags.admin_key_file,
                 "file of admin keys for drain, undrain and flush-cache");
  app.add_flag("--no-prefix-cache", flags.no_prefix_cache,
               "turn off the RadixAttention prefix cache");
  app.add_flag("--no-jump-forward", flags.no_jump_forward,
               "sample every token of constrained output, also where the constraint forces it");
  app.add_option("--speculative", flags.speculative,
                 "speculative decoding: 'ngram' (prompt lookup), 'draft' (--draft-model on rank "
                 "0) or 'self' (the model's first --self-spec-layers layers on rank 0), verified "
                 "losslessly, or 'none'")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "ngram", "draft", "self"}));
  app.add_option("--draft-model", flags.draft_model,
                 "--speculative draft: a smaller model with the same tokenizer (GGUF file or "
                 "Hugging Face folder)")
      ->check(CLI::ExistingPath);
  app.add_option("--self-spec-layers", flags.self_spec_layers,
                 "--speculative self: the draft's layers (0: a quarter of the model's)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--num-speculative-tokens", flags.num_speculative_tokens,
                 "most tokens proposed per sequence and step")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  app.add_option("--spec-min-acceptance", flags.spec_min_acceptance,
                 "a request accepting fewer of its proposals than this stops speculating")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--spec-disable-batch-size", flags.spec_disable_batch_size,
                 "no proposals in steps with more decoding sequences than this")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  AddNgramFlags(app, &flags.ngram);
  AddRequestLimitFlags(app, &flags.limits);
  app.add_option("--ready-timeout", flags.ready_timeout_s, "seconds to wait for the cluster")
      ->check(CLI::PositiveNumber);
  app.add_option("--prompt", flags.prompt, "answer this chat prompt once the cluster is ready");
  app.add_option("--max-tokens", flags.max_tokens, "tokens for --prompt")
      ->check(CLI::PositiveNumber);
  app.add_flag("--once", flags.once, "exit after answering --prompt");
  app.add_option("--log-file", flags.log_file,
                 "where every process's log goes (truncated at start)")
      ->capture_default_str();
  app.add_flag("-v,--verbose", flags.verbose, "stream the logs to stderr instead of --log-file");
  CLI11_PARSE(app, argc, argv);
  return tpserve::Run(flags);
}
