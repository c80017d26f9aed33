// tpserve-worker: one tensor-parallel rank. Serves WorkerService, registers with the coordinator,
// then does what the coordinator asks until Shutdown or SIGTERM/SIGINT (exit 0). Exits 1 with one
// line when it cannot serve or register.
#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/cluster_token.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/tls_flags.h"
#include "kernels/cpu/threads.h"
#include "worker/coordinator_link.h"
#include "worker/cpu_weights.h"
#include "worker/metrics_http.h"
#include "worker/worker_metrics.h"
#include "worker/worker_server.h"

namespace tpserve {
namespace {

struct Flags {
  std::string coordinator;
  int rank = -1;
  std::string model;
  std::string host = "127.0.0.1";
  int port = 0;
  int metrics_port = -1;
  int register_timeout_s = 30;
  int threads = 0;
  int local_rank = -1;
  double gpu_memory_utilization = 0.9;
  std::string cpu_weights = "auto";
  std::string cluster_token_file;
  std::string model_dir;
  std::string draft_model;
  std::vector<std::string> lora_paths;
  std::vector<std::string> lora_dirs;
  int coordinator_timeout_s = 30;
  std::string cpu_comm = "auto";
  TlsFiles tls;
};

int Run(const Flags& flags) {
  if (absl::Status s = LoadClusterToken(flags.cluster_token_file); !s.ok()) {
    std::fprintf(stderr, "tpserve-worker: --cluster-token-file: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  if (absl::Status s = LoadProcessTls(flags.tls); !s.ok()) {
    std::fprintf(stderr, "tpserve-worker: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (!HasClusterToken()) {
    LogWarning("worker",
               "rank %d: no cluster token (--cluster-token-file or %s): anyone who "
               "reaches this port can initialise, drive or stop this worker",
               flags.rank, kClusterTokenEnv);
  }
  cpu::SetCpuThreads(flags.threads);
  // Block the stop signals in every thread; one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  WorkerServerOptions options;
  options.rank = flags.rank;
  options.model_path = flags.model;
  options.host = flags.host;
  options.port = flags.port;
  options.cuda_device = flags.local_rank;
  options.gpu_memory_utilization = flags.gpu_memory_utilization;
  options.model_dir = flags.model_dir;
  options.draft_model_path = flags.draft_model;
  options.lora_paths = flags.lora_paths;
  options.lora_dirs = flags.lora_dirs;
  options.cpu_weights = *ParseCpuWeights(flags.cpu_weights);  // the flag admits only its names
  options.cpu_transport = *ParseCpuTransport(flags.cpu_comm);  // the flag admits only valid names
  auto server = WorkerServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "tpserve-worker: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  WorkerServer* worker = server->get();
  std::unique_ptr<MetricsHttpServer> metrics;
  if (flags.metrics_port >= 0) {
    auto started = MetricsHttpServer::Start(flags.host, flags.metrics_port, [worker] {
      return RenderWorkerMetrics(worker->MetricsSnapshot());
    });
    if (!started.ok()) {
      std::fprintf(stderr, "tpserve-worker: %s\n", std::string(started.status().message()).c_str());
      return 1;
    }
    metrics = *std::move(started);
    LogInfo("worker", "rank %d: metrics on %s:%d/metrics", flags.rank, flags.host, metrics->port());
  }
  CoordinatorLink::Options link_options;
  link_options.coordinator = flags.coordinator;
  link_options.rank = flags.rank;
  link_options.register_timeout = absl::Seconds(flags.register_timeout_s);
  link_options.silence = absl::Seconds(flags.coordinator_timeout_s);
  CoordinatorLink link(link_options, worker);
  std::thread([worker, stop_signals] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    LogInfo("worker", "received %s: shutting down", signal == SIGTERM ? "SIGTERM" : "SIGINT");
    worker->RequestShutdown(/*by_signal=*/true);
  }).detach();
  LogInfo("worker", "rank %d: serving on %s (pid %d)", flags.rank, worker->address(),
          static_cast<int>(getpid()));

  while (true) {
    worker->ForgetCoordinator();
    const std::string error = link.Register();
    if (!error.empty()) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    if (!worker->shutdown_requested()) {
      LogInfo("worker", "rank %d: registered with the coordinator at %s as %s", flags.rank,
              flags.coordinator, worker->address());
    }
    if (link.WaitForShutdownOrLoss()) break;
  }
  // The rank goes on serving steps while its group drains.
  if (worker->stopped_by_signal()) link.Leave();
  worker->Stop();
  LogInfo("worker", "rank %d: stopped", flags.rank);
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::Flags flags;
  CLI::App app{"tpserve worker: serves one tensor-parallel rank for the coordinator"};
  app.add_option("--coordinator", flags.coordinator, "HOST:PORT of the coordinator")->required();
  app.add_option("--rank", flags.rank, "this worker's rank")
      ->required()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--model", flags.model, "GGUF model file or Hugging Face folder")->required();
  app.add_option("--host", flags.host, "address to bind and advertise (gRPC and Gloo)")
      ->capture_default_str();
  app.add_option("--port", flags.port, "port to serve on; 0 picks a free one")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-port", flags.metrics_port,
                 "serve this rank's Prometheus metrics (step time, collective time, KV blocks) "
                 "at http://HOST:PORT/metrics on --host; 0 picks a free port, -1 (the default) "
                 "serves none")
      ->check(CLI::Range(-1, 65535))
      ->capture_default_str();
  app.add_option("--register-timeout", flags.register_timeout_s,
                 "seconds to keep trying to reach the coordinator")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  app.add_option("--threads", flags.threads,
                 "CPU threads for this rank's kernels; 0 = every core (give each of several "
                 "workers on one host its share)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--coordinator-timeout", flags.coordinator_timeout_s,
                 "seconds without a call from the coordinator (it heartbeats every second) after "
                 "which this worker registers again, for a coordinator restarted at the same "
                 "address whose loss closed no connection (a lost host); a closed connection is "
                 "noticed at once")
      ->capture_default_str()
      ->check(CLI::Range(2, 86400));
  app.add_option("--local-rank", flags.local_rank,
                 "CUDA device ordinal this rank uses on its host when the coordinator runs "
                 "--device cuda; -1 = rank mod the number of visible devices")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1023));
  app.add_option("--gpu-memory-utilization", flags.gpu_memory_utilization,
                 "share of the GPU's memory for weights, buffers and the KV pool (CUDA; the pool "
                 "takes what is left unless the coordinator sets --kv-cache-blocks or "
                 "--kv-cache-memory)")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 1.0));
  app.add_option("--cpu-weights", flags.cpu_weights,
                 "CPU: how weights in GGUF blocks are held and multiplied. packed: their own bytes, "
                 "activations rounded to 8 bits per block (as llama.cpp); packed-a16: the same, "
                 "activations at 16 bits (twice the integer work, within 1e-7 KL of fp32); fp32: "
                 "decoded at load, products in fp32 (4-8x the memory, slower); auto: packed-a16 "
                 "below 1B parameters, packed above")
      ->capture_default_str()
      ->check(CLI::IsMember(tpserve::CpuWeightsNames()));
  app.add_option("--cpu-comm", flags.cpu_comm,
                 "how CPU ranks all-reduce: auto = shared memory when every rank of the group "
                 "can map it (one host, one /dev/shm), else Gloo over TCP; shm = shared memory "
                 "or fail; gloo = Gloo, and the whole group with it")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "shm", "gloo"}));
  app.add_option(
      "--draft-model", flags.draft_model,
      "the draft model (GGUF file or Hugging Face folder) the coordinator may ask rank 0 "
      "to load for speculative decoding (--speculative draft)");
  app.add_option("--lora-path", flags.lora_paths,
                 "a LoRA adapter folder (PEFT) the coordinator may ask this worker to load "
                 "(--lora-modules); repeatable");
  app.add_option("--lora-dir", flags.lora_dirs,
                 "a directory whose LoRA adapter folders the coordinator may ask this worker to "
                 "load at run time (tpctl lora load); repeatable");
  app.add_option("--model-dir", flags.model_dir,
                 "a directory whose models the coordinator may ask this worker to load instead of "
                 "--model (default: none, only --model)");
  app.add_option("--cluster-token-file", flags.cluster_token_file,
                 "file holding the token every coordinator-worker call carries (default: $" +
                     std::string(tpserve::kClusterTokenEnv) + "; neither: an open worker)");
  tpserve::AddTlsFlags(app, &flags.tls);
  CLI11_PARSE(app, argc, argv);
  return tpserve::Run(flags);
}
