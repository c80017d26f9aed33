// A coordinator and its workers as child processes on this host: what the `tpserve` launcher
// runs, and what integration tests and benchmarks start. Ports are chosen at run time; every
// child is stopped when the LocalCluster goes away (and dies with this process).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_tls.h"
#include "common/subprocess.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {

struct LocalClusterOptions {
  std::string bin_dir;  // holds tpserve-coordinator and tpserve-worker
  std::string model;
  int world_size = 1;
  std::string host = "127.0.0.1";
  int port = 0;  // coordinator port; 0 = any free port
  int http_port = -1;  // the coordinator's OpenAI HTTP API: -1 = off, 0 = any free port
  int admin_port = 0;  // the coordinator's AdminService; 0 = any free port
  // Mutual TLS for every process of the cluster and for this object's own calls; empty: plaintext.
  TlsFiles tls;
  int64_t kv_cache_blocks = 0;
  int worker_threads = 0;  // per worker; 0 = the host's cores split evenly between the workers
  // Further coordinator flags, as --flag=value; each --lora-modules=name=path also gives every
  // worker --lora-path=path.
  std::vector<std::string> coordinator_args;
  std::vector<std::string> worker_args;       // further flags for every worker
  std::map<int, std::string> worker_models;   // per-rank model path overrides
  std::vector<int> ranks;                     // ranks to start; empty = every rank
  std::string log_dir;  // each child's output goes to <log_dir>/<name>.log; empty = inherited
};

class LocalCluster {
 public:
  // Starts the coordinator, waits (up to 30 s) for it to listen, then starts the workers.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const LocalClusterOptions& options);
  ~LocalCluster();

  // Waits until the coordinator reports SERVING. Fails with the cause when a child dies, the
  // cluster is degraded, or `timeout` passes. Logs progress messages as they change, and hands
  // `on_health` (when set) each answer while starting, and the one that says it serves.
  absl::Status WaitReady(
      absl::Duration timeout,
      const std::function<void(const v1::HealthResponse&)>& on_health = nullptr);
  // OK while every child runs; otherwise UNAVAILABLE naming the first that ended and how.
  absl::Status CheckChildren();
  void StopAll();

  const std::string& address() const { return address_; }
  // host:port of the OpenAI HTTP API; empty when http_port is -1.
  const std::string& http_address() const { return http_address_; }
  // host:port of AdminService (tpctl).
  const std::string& admin_address() const { return admin_address_; }
  // The credentials the cluster's processes use (plaintext without options.tls), for channels.
  const GrpcTls& tls() const { return tls_; }
  Subprocess& coordinator() { return children_.front().process; }
  // The worker process of `rank`, or null when it was not started.
  Subprocess* worker(int rank);
  // Stops the worker of `rank` if it still runs and starts it again with the same flags, as a
  // supervisor restarts a crashed worker (its log continues in <name>-restart<N>.log).
  absl::Status RestartWorker(int rank);
  // The same for the coordinator, on the ports it had (the workers know its address).
  absl::Status RestartCoordinator();
  v1::InferenceService::Stub& inference() { return *inference_; }
  // The random token the cluster's processes require on every coordinator-worker call (passed
  // to them as a 0600 file, removed with the cluster).
  const std::string& cluster_token() const { return token_; }
  std::string LogPath(const std::string& name) const;
  // How worker `rank`'s CPU group all-reduces, as its log says ("shared memory", "Gloo over TCP
  // (why)"); empty before the group has formed or without a log_dir.
  std::string WorkerCpuTransport(int rank) const;

 private:
  struct Child {
    std::string name;  // "coordinator", "worker-1"
    int rank;          // -1 for the coordinator
    Subprocess process;
    std::vector<std::string> args;
  };

  explicit LocalCluster(const LocalClusterOptions& options) : options_(options) {}
  absl::Status StartChild(const std::string& name, int rank, std::vector<std::string> args);
  // The port the coordinator wrote to `path`, once it has; fails when it dies or at `deadline`.
  absl::StatusOr<std::string> WaitForPortFile(const std::string& path, absl::Time deadline);

  absl::Status WriteClusterToken();
  std::string token_file() const { return token_dir_ + "/token"; }

  const LocalClusterOptions options_;
  std::string token_;
  std::string token_dir_;
  std::string address_;
  std::string http_address_;
  std::string admin_address_;
  GrpcTls tls_;
  std::vector<Child> children_;  // the coordinator first
  int restarts_ = 0;
  std::unique_ptr<v1::InferenceService::Stub> inference_;
};

}  // namespace tpserve
