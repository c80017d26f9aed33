#include "cli/local_cluster.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/cpu/threads.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {
namespace {

// How long a worker's end waits for the coordinator's, to tell which one failed first.
constexpr absl::Duration kCoordinatorExitGrace = absl::Seconds(2);

// The same TLS flags for every child (certificate files are read by each process).
std::vector<std::string> TlsArgs(const TlsFiles& tls) {
  if (tls.empty()) return {};
  std::vector<std::string> args = {"--tls-cert", tls.cert, "--tls-key", tls.key, "--tls-ca", tls.ca};
  if (!tls.server_name.empty()) args.insert(args.end(), {"--tls-server-name", tls.server_name});
  return args;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const LocalClusterOptions& options) {
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(options));
  // The coordinator writes its port here once it listens; removed on every path out.
  struct PortDir {
    std::string path;
    ~PortDir() { std::filesystem::remove_all(path); }
  };
  char dir_template[] = "/tmp/tpserve-port-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp failed");
  const PortDir port_dir{dir_template};
  const std::string port_file = port_dir.path + "/port";
  const std::string http_port_file = port_dir.path + "/http-port";
  const std::string admin_port_file = port_dir.path + "/admin-port";
  ASSIGN_OR_RETURN(cluster->tls_, GrpcTls::Load(options.tls));
  RETURN_IF_ERROR(cluster->WriteClusterToken());
  std::vector<std::string> args = {options.bin_dir + "/tpserve-coordinator",
                                   "--cluster-token-file", cluster->token_file(),
                                   "--model", options.model,
                                   "--world-size", std::to_string(options.world_size),
                                   "--host", options.host,
                                   "--port", std::to_string(options.port),
                                   "--port-file", port_file,
                                   "--http-port", std::to_string(options.http_port),
                                   "--admin-port", std::to_string(options.admin_port),
                                   "--admin-port-file", admin_port_file};
  const std::vector<std::string> tls_args = TlsArgs(options.tls);
  args.insert(args.end(), tls_args.begin(), tls_args.end());
  if (options.http_port >= 0) args.insert(args.end(), {"--http-port-file", http_port_file});
  if (options.kv_cache_blocks > 0) {
    args.insert(args.end(), {"--kv-cache-blocks", std::to_string(options.kv_cache_blocks)});
  }
  args.insert(args.end(), options.coordinator_args.begin(), options.coordinator_args.end());
  RETURN_IF_ERROR(cluster->StartChild("coordinator", -1, args));

  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  ASSIGN_OR_RETURN(const std::string port, cluster->WaitForPortFile(port_file, deadline));
  cluster->address_ = absl::StrCat(options.host, ":", port);
  ASSIGN_OR_RETURN(const std::string admin_port,
                   cluster->WaitForPortFile(admin_port_file, deadline));
  cluster->admin_address_ = absl::StrCat(options.host, ":", admin_port);
  if (options.http_port >= 0) {
    ASSIGN_OR_RETURN(const std::string http_port,
                     cluster->WaitForPortFile(http_port_file, deadline));
    cluster->http_address_ = absl::StrCat(options.host, ":", http_port);
  }

  std::vector<int> ranks = options.ranks;
  if (ranks.empty()) {
    for (int rank = 0; rank < options.world_size; ++rank) ranks.push_back(rank);
  }
  const int threads = options.worker_threads > 0
                          ? options.worker_threads
                          : std::max(1, cpu::AvailableCores() / static_cast<int>(ranks.size()));
  for (int rank : ranks) {
    const auto model = options.worker_models.find(rank);
    std::vector<std::string> worker_args = {
        options.bin_dir + "/tpserve-worker", "--coordinator", cluster->address_, "--rank",
        std::to_string(rank), "--model",
        model == options.worker_models.end() ? options.model : model->second, "--host",
        options.host, "--threads", std::to_string(threads), "--cluster-token-file",
        cluster->token_file()};
    worker_args.insert(worker_args.end(), tls_args.begin(), tls_args.end());
    worker_args.insert(worker_args.end(), options.worker_args.begin(), options.worker_args.end());
    // Every rank may load the LoRA adapters the coordinator names (--lora-modules=name=path).
    constexpr std::string_view kLora = "--lora-modules=";
    for (const std::string& arg : options.coordinator_args) {
      const size_t eq = arg.find('=', kLora.size());
      if (arg.starts_with(kLora) && eq != std::string::npos) {
        worker_args.push_back(absl::StrCat("--lora-path=", arg.substr(eq + 1)));
      }
    }
    RETURN_IF_ERROR(cluster->StartChild(absl::StrCat("worker-", rank), rank, worker_args));
  }
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(256 << 20);
  // The coordinator may come back on the same address (RestartCoordinator): reconnect within a
  // second of it listening, not after gRPC's backoff of up to two minutes, nor behind another
  // channel's backoff in the process-wide subchannel pool.
  channel_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  channel_args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  channel_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  cluster->inference_ =
      v1::InferenceService::NewStub(cluster->tls_.Channel(cluster->address_, channel_args));
  return cluster;
}

LocalCluster::~LocalCluster() {
  StopAll();
  if (!token_dir_.empty()) std::filesystem::remove_all(token_dir_);
}

absl::Status LocalCluster::WriteClusterToken() {
  unsigned char bytes[32];
  if (getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    return absl::InternalError("getrandom failed: no cluster token");
  }
  token_ = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
  char dir_template[] = "/tmp/tpserve-token-XXXXXX";  // mkdtemp: mode 0700
  if (mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp failed");
  token_dir_ = dir_template;
  const int fd = open(token_file().c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return absl::InternalError("cannot create the cluster token file");
  const bool written = write(fd, token_.data(), token_.size()) == static_cast<ssize_t>(token_.size());
  close(fd);
  if (!written) return absl::InternalError("cannot write the cluster token file");
  return absl::OkStatus();
}

absl::StatusOr<std::string> LocalCluster::WaitForPortFile(const std::string& path,
                                                          absl::Time deadline) {
  while (true) {
    RETURN_IF_ERROR(CheckChildren());
    std::ifstream in(path);
    std::string port;
    std::getline(in, port);
    if (!port.empty()) return port;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError("the coordinator did not start listening within 30 s");
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::string LocalCluster::LogPath(const std::string& name) const {
  return options_.log_dir.empty() ? "" : options_.log_dir + "/" + name + ".log";
}

std::string LocalCluster::WorkerCpuTransport(int rank) const {
  std::ifstream log(LogPath(absl::StrCat("worker-", rank)));
  // The line WorkerServer logs when the group forms.
  constexpr std::string_view kMarker = " ranks all-reduces through ";
  std::string line, transport;
  while (std::getline(log, line)) {
    const size_t at = line.find(kMarker);
    if (at != std::string::npos) transport = line.substr(at + kMarker.size());
  }
  return transport;
}

absl::Status LocalCluster::StartChild(const std::string& name, int rank,
                                      std::vector<std::string> args) {
  ASSIGN_OR_RETURN(Subprocess process, Subprocess::Start(args, LogPath(name)));
  children_.push_back({name, rank, std::move(process), std::move(args)});
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartCoordinator() {
  Child& old = children_.front();
  old.process.Stop();
  auto port_of = [](const std::string& address) { return address.substr(address.rfind(':') + 1); };
  std::vector<std::string> args;
  for (size_t i = 0; i < old.args.size(); ++i) {
    const std::string& arg = old.args[i];
    if (arg == "--port-file" || arg == "--http-port-file" ||
        arg == "--admin-port-file") {  // read once, at Start
      ++i;
      continue;
    }
    args.push_back(arg);
    if (arg == "--port" && i + 1 < old.args.size()) {
      args.push_back(port_of(address_));
      ++i;
    } else if (arg == "--http-port" && i + 1 < old.args.size() && !http_address_.empty()) {
      args.push_back(port_of(http_address_));
      ++i;
    } else if (arg == "--admin-port" && i + 1 < old.args.size()) {
      args.push_back(port_of(admin_address_));
      ++i;
    }
  }
  children_.erase(children_.begin());
  RETURN_IF_ERROR(
      StartChild(absl::StrCat("coordinator-restart", ++restarts_), -1, std::move(args)));
  std::rotate(children_.begin(), children_.end() - 1, children_.end());  // the coordinator first
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartWorker(int rank) {
  const auto child = std::find_if(children_.begin(), children_.end(),
                                  [rank](const Child& c) { return c.rank == rank; });
  if (child == children_.end()) {
    return absl::NotFoundError(absl::StrCat("no worker of rank ", rank, " was started"));
  }
  child->process.Stop();
  std::vector<std::string> args = std::move(child->args);
  children_.erase(child);
  return StartChild(absl::StrCat("worker-", rank, "-restart", ++restarts_), rank, std::move(args));
}

Subprocess* LocalCluster::worker(int rank) {
  for (Child& child : children_) {
    if (child.rank == rank) return &child.process;
  }
  return nullptr;
}

absl::Status LocalCluster::CheckChildren() {
  for (Child& child : children_) {
    std::optional<int> status = child.process.Poll();
    if (!status.has_value()) continue;
    Child* ended = &child;
    // A coordinator that fails start-up shuts its workers down first: name it, not the worker,
    // when it follows with a failure of its own (its log has the cause).
    if (child.rank >= 0) {
      Child& coordinator = children_.front();
      const std::optional<int> coordinator_status =
          coordinator.process.Wait(kCoordinatorExitGrace);
      if (coordinator_status.has_value() && *coordinator_status != 0) {
        ended = &coordinator;
        status = coordinator_status;
      }
    }
    return absl::UnavailableError(absl::StrCat(ended->name, " (pid ", ended->process.pid(), ") ",
                                               DescribeWaitStatus(*status)));
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::WaitReady(
    absl::Duration timeout, const std::function<void(const v1::HealthResponse&)>& on_health) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last_message;
  while (true) {
    RETURN_IF_ERROR(CheckChildren());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::HealthResponse health;
    const grpc::Status status = inference_->Health(&context, v1::HealthRequest(), &health);
    // Serving too: a load done between two polls is known only from this answer.
    if (status.ok() && on_health) on_health(health);
    if (status.ok() && health.state() == v1::HealthResponse::STATE_SERVING) {
      return absl::OkStatus();
    }
    if (status.ok() && health.state() == v1::HealthResponse::STATE_DEGRADED) {
      return absl::UnavailableError(absl::StrCat("cluster degraded: ", health.message()));
    }
    if (status.ok() && health.message() != last_message) {
      last_message = health.message();
      LogInfo("cluster", "waiting: %s", last_message);
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the cluster was not ready within ", absl::FormatDuration(timeout), ": ", last_message));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

void LocalCluster::StopAll() {
  // The coordinator first: it shuts its workers down; the rest then get SIGTERM.
  for (Child& child : children_) {
    if (child.process.running()) child.process.Stop(absl::Seconds(10));
  }
}

}  // namespace tpserve
