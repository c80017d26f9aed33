// One coordinator process. It owns its parts in the order they start, and Run stops them in the
// reverse order:
//   1. what the model file says: tokenizer, config, serving plan, sampling defaults, chat template
//      (LoadModel);
//   2. the HTTP front end, first, so that /health answers during start-up; then the gRPC client
//      port (InferenceService, ClusterService) and the admin port (StartFrontEnds);
//   3. the cluster: every rank registered, Init (the collective rendezvous), LoadShard
//      (FormCluster);
//   4. the engine, the group reformer and the heartbeats, serving until a stop is requested, then
//      the drain (Serve);
//   5. engine, HTTP, gRPC servers, front-end pool and workers stopped, in that order (Shutdown).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "coordinator/admin_service.h"
#include "coordinator/bearer_keys.h"
#include "coordinator/cluster_service.h"
#include "coordinator/coordinator_flags.h"
#include "coordinator/engine.h"
#include "coordinator/front_end_pool.h"
#include "coordinator/group_reformer.h"
#include "coordinator/http_server.h"
#include "coordinator/inference_service.h"
#include "coordinator/load_progress.h"
#include "coordinator/lora_manager.h"
#include "coordinator/metrics.h"
#include "coordinator/serving_plan.h"
#include "coordinator/worker_pool.h"
#include "grpcpp/grpcpp.h"
#include "model/chat_template.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "model/tokenizer.h"

namespace tpserve {

class Coordinator {
 public:
  // `stop` is notified (by a signal handler) to end serving; both must outlive the coordinator.
  Coordinator(const CoordinatorFlags& flags, absl::Notification* stop)
      : flags_(flags), stop_(stop) {}
  ~Coordinator();

  // Starts, serves until `stop`, drains and stops. The exit status: 0 after a stop (during
  // start-up too), 1 when start-up fails (the log says why).
  int Run();

 private:
  // Each step fails with the message the log shows; FormCluster with CANCELLED on a stop.
  absl::Status LoadModel();
  absl::Status StartFrontEnds();
  absl::Status FormCluster();
  void Serve();
  void Shutdown();

  const CoordinatorFlags& flags_;
  absl::Notification* const stop_;

  // 1. The model.
  BearerKeys api_keys_;
  BearerKeys admin_keys_;
  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ServingPlan plan_;
  SamplingParams default_sampling_;
  std::string served_model_name_;
  std::unique_ptr<ChatTemplate> chat_template_;
  ReasoningParser reasoning_ = ReasoningParser::kNone;
  std::unique_ptr<LoraManager> loras_;  // before the front ends that read it

  // 2. The front ends.
  std::unique_ptr<Metrics> metrics_;
  bool counting_auth_refusals_ = false;
  std::unique_ptr<FrontEndPool> front_end_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<ClusterServiceImpl> cluster_;
  LoadProgress load_progress_;
  std::unique_ptr<InferenceServiceImpl> inference_;
  std::unique_ptr<AdminServiceImpl> admin_;
  std::unique_ptr<grpc::Server> admin_server_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;

  // 3. The cluster.
  std::unique_ptr<WorkerPool> pool_;
  WorkerInitOptions init_;
  std::optional<LoadedModel> loaded_;

  // 4. Serving.
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<GroupReformer> reformer_;
};

}  // namespace tpserve
