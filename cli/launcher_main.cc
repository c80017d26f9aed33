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
#include "coordinator/coordinator_flags.h"
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

// The coordinator's own flags (AddCoordinatorFlags) go through to it unchanged, but those that
// lay out the local cluster (kLaunchersOwn), which the launcher sets itself.
struct Flags {
  CoordinatorFlags coordinator;
  std::vector<std::string> coordinator_args;  // the given coordinator flags, passed through
  int tp = 1;
  double gpu_memory_utilization = 0.9;
  std::string cpu_weights = "auto";
  std::vector<std::string> lora_dirs;  // the workers' --lora-dir
  int worker_restarts = 5;
  int ready_timeout_s = 600;
  std::string prompt;
  int max_tokens = 64;
  bool once = false;
  std::string log_file = "tpserve.log";
  bool verbose = false;  // the logs on stderr instead of log_file
};

// Coordinator flags the launcher decides (--tp times --pipeline-parallel-size is the world size;
// the files and the token are its own) and so does not take.
constexpr const char* kLaunchersOwn[] = {"--world-size", "--port-file", "--http-port-file",
                                         "--admin-port-file", "--cluster-token-file"};
// Coordinator flags that lay out the local cluster: LocalCluster passes them on, and API keys go
// through the environment, not an argv any local user can read in /proc.
const std::vector<std::string> kNotPassedThrough = {
    "--model", "--host", "--port", "--http-port", "--admin-port", "--tls-cert", "--tls-key",
    "--tls-ca", "--tls-server-name", "--api-key"};

std::string BinaryDir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

absl::Status AnswerPrompt(const Flags& flags, const Console& console, LocalCluster& cluster) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, OpenModel(flags.coordinator.model));
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(*file));
  ASSIGN_OR_RETURN(const ChatTemplate chat_template,
                   ChatTemplate::Load(*file, *tokenizer, flags.coordinator.chat_template));
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
  const CoordinatorFlags& coordinator = flags.coordinator;
  LocalClusterOptions options;
  options.bin_dir = BinaryDir();
  options.model = coordinator.model;
  const int world = flags.tp * coordinator.pipeline_parallel_size;
  options.world_size = world;
  options.host = coordinator.host;
  options.port = coordinator.port;
  options.http_port = coordinator.http_port;
  options.admin_port = coordinator.admin_port;
  options.tls = coordinator.tls;
  options.coordinator_args = flags.coordinator_args;
  if (!coordinator.api_keys.empty()) {
    const char* inherited = std::getenv("TPSERVE_API_KEY");
    std::string keys = inherited == nullptr ? "" : absl::StrCat(inherited, "\n");
    absl::StrAppend(&keys, absl::StrJoin(coordinator.api_keys, "\n"));
    setenv("TPSERVE_API_KEY", keys.c_str(), /*overwrite=*/1);
  }
  if (coordinator.device == "cuda") {
    // On one host, rank r drives GPU r (the workers' default --local-rank).
    options.worker_args.push_back(
        absl::StrCat("--gpu-memory-utilization=", flags.gpu_memory_utilization));
  } else {
    options.worker_args.push_back(absl::StrCat("--cpu-weights=", flags.cpu_weights));
  }
  for (const std::string& dir : flags.lora_dirs) {
    options.worker_args.push_back(absl::StrCat("--lora-dir=", dir));
  }
  // Rank 0 loads the draft the coordinator names.
  if (!coordinator.draft_model.empty()) {
    options.worker_args.push_back(absl::StrCat("--draft-model=", coordinator.draft_model));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(options));
  LogInfo("tpserve", "coordinator listening on %s; started %d workers", cluster->address(), world);
  const std::string http = cluster->http_address().empty()
                               ? "HTTP off"
                               : absl::StrCat("HTTP at ", cluster->http_address());
  const std::string logs =
      console.log_file.empty() ? "" : absl::StrCat("; logs in ", console.log_file);
  std::fprintf(console.out, "tpserve: gRPC at %s; %s; admin at %s%s\n", cluster->address().c_str(),
               http.c_str(), cluster->admin_address().c_str(), logs.c_str());
  std::fflush(console.out);
  LoadProgressLine progress(console,
                            absl::StrCat(coordinator.model, " on ", world, " ", coordinator.device,
                                         world == 1 ? " worker" : " workers"));
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
  return Supervise(*cluster, world, flags.worker_restarts);
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
  CLI::App app{
      "Start a local tpserve cluster: a coordinator and --tp × --pipeline-parallel-size workers"};
  tpserve::AddCoordinatorFlags(app, &flags.coordinator);
  for (const char* name : tpserve::kLaunchersOwn) app.remove_option(app.get_option(name));
  app.add_option("--tp", flags.tp,
                 "tensor-parallel size: workers per pipeline stage (--pipeline-parallel-size "
                 "stages of them)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
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
  app.add_option("--lora-dir", flags.lora_dirs,
                 "a directory whose LoRA adapter folders `tpctl lora load` may load at run time "
                 "(every worker's --lora-dir); repeatable");
  app.add_option("--worker-restarts", flags.worker_restarts,
                 "times in all a worker that dies is started again; 0 = a worker's death stops "
                 "the cluster")
      ->check(CLI::NonNegativeNumber);
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
  flags.coordinator_args = tpserve::GivenCoordinatorArgs(app, tpserve::kNotPassedThrough);
  return tpserve::Run(flags);
}
