// tpserve: starts a coordinator and N workers on this host, supervises them, and stops them all
// on Ctrl-C or when any of them dies (saying which one and why).
//   tpserve --model M --tp N --device cpu [--prompt "..."] [--once]
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "model/chat_template.h"
#include "model/gguf_file.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {
namespace {

std::atomic<int> g_stop_signal{0};

void OnSignal(int signal) { g_stop_signal = signal; }

struct Flags {
  std::string model;
  int tp = 1;
  std::string device = "cpu";
  std::string host = "127.0.0.1";
  int port = 0;
  int64_t kv_cache_blocks = 0;
  int ready_timeout_s = 600;
  std::string prompt;
  int max_tokens = 64;
  bool once = false;
};

struct Child {
  std::string name;  // "coordinator", "worker rank 2"
  Subprocess process;
};

class Cluster {
 public:
  explicit Cluster(const Flags& flags) : flags_(flags) {}
  ~Cluster() { StopAll(); }

  absl::Status Start();
  // Waits until the coordinator reports SERVING; fails when a child dies or on timeout.
  absl::Status WaitReady();
  absl::Status AnswerPrompt();
  // Returns when a signal arrives (OK) or a child dies (the error names it).
  absl::Status Supervise();
  void StopAll();

  const std::string& address() const { return address_; }

 private:
  absl::Status CheckChildren();
  std::string Binary(const std::string& name) const;

  const Flags flags_;
  std::string address_;
  std::vector<Child> children_;  // coordinator first
  std::unique_ptr<v1::InferenceService::Stub> stub_;
};

std::string Cluster::Binary(const std::string& name) const {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

absl::Status Cluster::CheckChildren() {
  for (Child& child : children_) {
    if (std::optional<int> status = child.process.Poll()) {
      return absl::UnavailableError(absl::StrCat(child.name, " (pid ", child.process.pid(), ") ",
                                                 DescribeWaitStatus(*status)));
    }
  }
  if (g_stop_signal != 0) return absl::CancelledError(strsignal(g_stop_signal));
  return absl::OkStatus();
}

absl::Status Cluster::Start() {
  char dir_template[] = "/tmp/tpserve-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string port_file = std::string(dir_template) + "/port";
  std::vector<std::string> args = {Binary("tpserve-coordinator"),
                                   "--model", flags_.model,
                                   "--world-size", std::to_string(flags_.tp),
                                   "--host", flags_.host,
                                   "--port", std::to_string(flags_.port),
                                   "--port-file", port_file};
  if (flags_.kv_cache_blocks > 0) {
    args.insert(args.end(), {"--kv-cache-blocks", std::to_string(flags_.kv_cache_blocks)});
  }
  ASSIGN_OR_RETURN(Subprocess coordinator, Subprocess::Start(args));
  children_.push_back({"coordinator", std::move(coordinator)});

  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::string port;
  while (port.empty()) {
    RETURN_IF_ERROR(CheckChildren());
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError("the coordinator did not start listening within 30 s");
    }
    std::ifstream in(port_file);
    std::getline(in, port);
    if (port.empty()) absl::SleepFor(absl::Milliseconds(20));
  }
  std::filesystem::remove_all(dir_template);
  address_ = absl::StrCat(flags_.host, ":", port);
  LogInfo("tpserve", "coordinator listening on %s; starting %d workers", address_, flags_.tp);
  for (int rank = 0; rank < flags_.tp; ++rank) {
    ASSIGN_OR_RETURN(Subprocess worker,
                     Subprocess::Start({Binary("tpserve-worker"), "--coordinator", address_,
                                        "--rank", std::to_string(rank), "--model", flags_.model,
                                        "--host", flags_.host}));
    children_.push_back({absl::StrCat("worker rank ", rank), std::move(worker)});
  }
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(256 << 20);
  stub_ = v1::InferenceService::NewStub(grpc::CreateCustomChannel(
      address_, grpc::InsecureChannelCredentials(), channel_args));
  return absl::OkStatus();
}

absl::Status Cluster::WaitReady() {
  const absl::Time deadline = absl::Now() + absl::Seconds(flags_.ready_timeout_s);
  std::string last_message;
  while (true) {
    RETURN_IF_ERROR(CheckChildren());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::HealthResponse health;
    const grpc::Status status = stub_->Health(&context, v1::HealthRequest(), &health);
    if (status.ok() && health.state() == v1::HealthResponse::STATE_SERVING) return absl::OkStatus();
    if (status.ok() && health.state() == v1::HealthResponse::STATE_DEGRADED) {
      return absl::UnavailableError(absl::StrCat("cluster degraded: ", health.message()));
    }
    if (status.ok() && health.message() != last_message) {
      last_message = health.message();
      LogInfo("tpserve", "waiting: %s", last_message);
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("the cluster was not ready within ",
                                                      flags_.ready_timeout_s, " s: ",
                                                      last_message));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

absl::Status Cluster::AnswerPrompt() {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(flags_.model));
  ASSIGN_OR_RETURN(const std::string source, file->GetString("tokenizer.chat_template"));
  ASSIGN_OR_RETURN(const ChatTemplate chat_template, ChatTemplate::Detect(source));
  v1::GenerateRequest request;
  request.set_text(chat_template.Apply({{"user", flags_.prompt}}, /*add_generation_prompt=*/true));
  request.set_max_tokens(flags_.max_tokens);
  request.mutable_sampling()->set_temperature(0.0f);
  grpc::ClientContext context;
  auto reader = stub_->Generate(&context, request);
  v1::GenerateResponse chunk;
  std::printf("> %s\n", flags_.prompt.c_str());
  while (reader->Read(&chunk)) {
    std::fwrite(chunk.text().data(), 1, chunk.text().size(), stdout);
    std::fflush(stdout);
  }
  std::printf("\n");
  const grpc::Status status = reader->Finish();
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("Generate failed: ", status.error_message()));
  }
  return absl::OkStatus();
}

absl::Status Cluster::Supervise() {
  while (true) {
    const absl::Status status = CheckChildren();
    if (absl::IsCancelled(status)) return absl::OkStatus();
    RETURN_IF_ERROR(status);
    absl::SleepFor(absl::Milliseconds(100));
  }
}

void Cluster::StopAll() {
  // The coordinator first: it shuts its workers down; the rest get SIGTERM.
  for (Child& child : children_) {
    if (child.process.running()) child.process.Stop(absl::Seconds(10));
  }
  children_.clear();
}

int Run(const Flags& flags) {
  if (flags.device != "cpu") {
    std::fprintf(stderr, "tpserve: --device %s: only cpu workers are built so far\n",
                 flags.device.c_str());
    return 2;
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  Cluster cluster(flags);
  absl::Status status = cluster.Start();
  if (status.ok()) status = cluster.WaitReady();
  if (status.ok()) {
    std::printf("tpserve: serving %s with tensor parallelism %d on %s; gRPC at %s\n",
                flags.model.c_str(), flags.tp, flags.device.c_str(), cluster.address().c_str());
    std::fflush(stdout);
  }
  if (status.ok() && !flags.prompt.empty()) status = cluster.AnswerPrompt();
  if (status.ok() && !flags.once) {
    std::printf("tpserve: Ctrl-C stops the cluster\n");
    std::fflush(stdout);
    status = cluster.Supervise();
  }
  cluster.StopAll();
  if (!status.ok() && !absl::IsCancelled(status)) {
    std::fprintf(stderr, "tpserve: %s; stopped every process\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "tpserve: stopped\n");
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::Flags flags;
  CLI::App app{"Start a local tpserve cluster: a coordinator and --tp workers"};
  app.add_option("--model", flags.model, "GGUF model file")->required()->check(CLI::ExistingFile);
  app.add_option("--tp", flags.tp, "tensor-parallel size (number of workers)")
      ->check(CLI::Range(1, 64));
  app.add_option("--device", flags.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--host", flags.host, "address to listen on");
  app.add_option("--port", flags.port, "coordinator port (0 = any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--kv-cache-blocks", flags.kv_cache_blocks, "KV pool size (0 = workers decide)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ready-timeout", flags.ready_timeout_s, "seconds to wait for the cluster")
      ->check(CLI::PositiveNumber);
  app.add_option("--prompt", flags.prompt, "answer this chat prompt once the cluster is ready");
  app.add_option("--max-tokens", flags.max_tokens, "tokens for --prompt")
      ->check(CLI::PositiveNumber);
  app.add_flag("--once", flags.once, "exit after answering --prompt");
  CLI11_PARSE(app, argc, argv);
  return tpserve::Run(flags);
}
