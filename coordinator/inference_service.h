// InferenceService (inference.proto) over the engine: the public gRPC edge, where requests are
// tokenized and absl::Status becomes grpc::Status. Generate streams the engine's text (whole
// UTF-8, stop strings removed), the n samples' chunks interleaved.
//
// Threads: gRPC's callback API, so an open call holds no thread. Tokenizing, submitting (which
// waits for an output constraint to compile) and turning the engine's news into chunks run on
// the FrontEndPool; the engine's notifier only posts there. A call the pool has no room for is
// refused with RESOURCE_EXHAUSTED.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/bearer_keys.h"
#include "coordinator/engine.h"
#include "coordinator/front_end_pool.h"
#include "coordinator/load_progress.h"
#include "coordinator/lora_manager.h"
#include "coordinator/openai_request.h"
#include "coordinator/reasoning.h"
#include "kernels/sampling_params.h"
#include "model/tokenizer.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {

// A Generate request as the engine takes it, and for a chat prompt how each sample's text is split
// (the model's thinking, tool calls) before it is sent.
struct GrpcGenerate {
  GenerateParams params;
  struct ChatSplit {
    ReasoningStart reasoning = ReasoningStart::kNone;
    std::optional<ToolCallSyntax> tools;
    bool include_reasoning = true;
  };
  std::optional<ChatSplit> chat;
};

class InferenceServiceImpl final : public v1::InferenceService::CallbackService {
 public:
  // `tokenizer` and `pool` must outlive the service. `model_name` is what ListModels reports;
  // `default_sampling` what a request's unset Sampling fields take.
  InferenceServiceImpl(const Tokenizer* tokenizer, FrontEndPool* pool, int world_size,
                       std::string model_name, SamplingParams default_sampling = {});

  // Until an engine is set, Generate and Score answer UNAVAILABLE "cluster is starting" and
  // Health says STATE_STARTING. `engine` must outlive the server.
  void SetEngine(Engine* engine) { engine_.store(engine); }
  // Health reports this while starting; `progress` must outlive the server.
  void SetLoadProgress(const LoadProgress* progress) { load_progress_ = progress; }
  // From now on every method but Health needs metadata `authorization: Bearer <one of the keys>`
  // (UNAUTHENTICATED otherwise). `keys` must outlive the service; null or empty: open.
  void SetBearerKeys(const BearerKeys* keys) { api_keys_ = keys; }
  // Chat prompts render with `chat_template` (null: refused) and split out the thinking as
  // `reasoning` says. `chat_template` must outlive the service.
  void SetChat(const ChatTemplate* chat_template, ReasoningParser reasoning);
  // The LoRA adapters requests may name; must outlive the service.
  void SetLoras(const LoraManager* loras) { loras_ = loras; }
  // The adapter `model` names (slot 0: empty or the base model); NOT_FOUND otherwise.
  absl::StatusOr<LoraModule> AdapterOf(const std::string& model) const;

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* context,
                                  const v1::ScoreRequest* request,
                                  v1::ScoreResponse* response) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const v1::HealthRequest* request,
                                   v1::HealthResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;

  // What the calls use (generate_call.cc, score_call.cc).
  FrontEndPool& pool() const { return *pool_; }
  grpc::Status CheckKey(const grpc::CallbackServerContext& context, const char* method) const {
    return api_keys_ == nullptr ? grpc::Status::OK
                                : api_keys_->Check(context, method, kSurfaceInference);
  }
  // The engine, or UNAVAILABLE while starting.
  absl::StatusOr<Engine*> GetEngine() const;
  // The request as the engine takes it: prompt tokenized (a chat rendered first), sampling
  // defaults filled in.
  absl::StatusOr<GrpcGenerate> ToParams(const v1::GenerateRequest& request,
                                        const Engine& engine) const;

 private:
  const Tokenizer* const tokenizer_;
  FrontEndPool* const pool_;
  const LoadProgress* load_progress_ = nullptr;
  const int world_size_;
  const std::string model_name_;
  const SamplingParams default_sampling_;
  std::atomic<Engine*> engine_{nullptr};
  const BearerKeys* api_keys_ = nullptr;
  const ChatTemplate* chat_template_ = nullptr;
  ToolCallFormat tool_format_;
  ReasoningParser reasoning_ = ReasoningParser::kNone;
  const LoraManager* loras_ = nullptr;
};

// The refusal of a call the FrontEndPool has no room for.
grpc::Status FrontEndBusy();

}  // namespace tpserve
