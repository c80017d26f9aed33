// InferenceService (inference.proto) over the engine: the public gRPC edge, where requests are
// tokenized and absl::Status becomes grpc::Status. Generate streams the engine's text (whole
// UTF-8, stop strings removed), the n samples' chunks interleaved.
//
// Thread-safe: gRPC's sync server runs each call on its own thread.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/bearer_keys.h"
#include "coordinator/engine.h"
#include "coordinator/load_progress.h"
#include "kernels/sampling_params.h"
#include "model/tokenizer.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {

class InferenceServiceImpl final : public v1::InferenceService::Service {
 public:
  // `tokenizer` must outlive the service. `model_name` is what ListModels reports;
  // `default_sampling` what a request's unset Sampling fields take.
  InferenceServiceImpl(const Tokenizer* tokenizer, int world_size, std::string model_name,
                       SamplingParams default_sampling = {});

  // Until an engine is set, Generate and Score answer UNAVAILABLE "cluster is starting" and
  // Health says STATE_STARTING. `engine` must outlive the server.
  void SetEngine(Engine* engine) { engine_.store(engine); }
  // Health reports this while starting; `progress` must outlive the server.
  void SetLoadProgress(const LoadProgress* progress) { load_progress_ = progress; }
  // From now on every method but Health needs metadata `authorization: Bearer <one of the keys>`
  // (UNAUTHENTICATED otherwise). `keys` must outlive the service; null or empty: open.
  void SetBearerKeys(const BearerKeys* keys) { api_keys_ = keys; }

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                     v1::ScoreResponse* response) override;
  grpc::Status Health(grpc::ServerContext* context, const v1::HealthRequest* request,
                      v1::HealthResponse* response) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;

 private:
  grpc::Status CheckKey(const grpc::ServerContext& context, const char* method) const {
    return api_keys_ == nullptr ? grpc::Status::OK
                                : api_keys_->Check(context, method, kSurfaceInference);
  }
  // The request as the engine takes it: prompt tokenized, sampling defaults filled in.
  absl::StatusOr<GenerateParams> ToParams(const v1::GenerateRequest& request,
                                          const Engine& engine) const;
  // The engine, or UNAVAILABLE while starting.
  absl::StatusOr<Engine*> GetEngine() const;
  // Waits for the stream's final update; CANCELLED (and the stream cancelled) when the client
  // goes away first.
  absl::StatusOr<StreamUpdate> WaitDone(grpc::ServerContext* context, RequestStream& stream);

  const Tokenizer* const tokenizer_;
  const LoadProgress* load_progress_ = nullptr;
  const int world_size_;
  const std::string model_name_;
  const SamplingParams default_sampling_;
  std::atomic<Engine*> engine_{nullptr};
  const BearerKeys* api_keys_ = nullptr;
};

}  // namespace tpserve
