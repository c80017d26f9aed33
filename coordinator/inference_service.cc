#include "coordinator/inference_service.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "coordinator/inference_calls.h"
#include "coordinator/inference_wire.h"

namespace tpserve {
namespace {

// The reactor of a call answered at once.
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

}  // namespace

grpc::Status FrontEndBusy() {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      "the server has too many requests waiting to be read; retry in a second");
}

InferenceServiceImpl::InferenceServiceImpl(const Tokenizer* tokenizer, FrontEndPool* pool,
                                           int world_size, std::string model_name,
                                           SamplingParams default_sampling)
    : tokenizer_(tokenizer),
      pool_(pool),
      world_size_(world_size),
      model_name_(std::move(model_name)),
      default_sampling_(default_sampling) {}

absl::StatusOr<Engine*> InferenceServiceImpl::GetEngine() const {
  Engine* engine = engine_.load();
  if (engine == nullptr) {
    return absl::UnavailableError("cluster is starting: workers are not loaded yet");
  }
  return engine;
}

absl::StatusOr<LoraModule> InferenceServiceImpl::AdapterOf(const std::string& model) const {
  if (model.empty()) return LoraModule();
  std::optional<LoraModule> named = LoraNamed(
      loras_ != nullptr ? loras_->Serving() : std::vector<LoraModule>(), model_name_, model);
  if (named.has_value()) return *std::move(named);
  return absl::NotFoundError(absl::StrCat(
      "model '", model, "' does not exist; this server serves '", model_name_, "' (ListModels)"));
}

void InferenceServiceImpl::SetChat(const ChatTemplate* chat_template, ReasoningParser reasoning) {
  chat_template_ = chat_template;
  tool_format_ =
      chat_template != nullptr ? DetectToolCallFormat(chat_template->source()) : ToolCallFormat{};
  reasoning_ = reasoning;
}

absl::StatusOr<GrpcGenerate> InferenceServiceImpl::ToParams(const v1::GenerateRequest& request,
                                                            const Engine& engine) const {
  GrpcGenerate out;
  GenerateParams& params = out.params;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText: {
      ASSIGN_OR_RETURN(
          params.prompt,
          EncodeBoundedPrompt(request.text(), engine.options().context_length, *tokenizer_));
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      params.prompt.assign(request.token_ids().ids().begin(), request.token_ids().ids().end());
      break;
    case v1::GenerateRequest::kChat: {
      ASSIGN_OR_RETURN(const nlohmann::ordered_json body,
                       ChatBody(request.chat(), request.constraint()));
      const ServedModel model{model_name_,
                              engine.options().context_length,
                              tokenizer_,
                              chat_template_,
                              default_sampling_,
                              engine.options().limits,
                              tool_format_,
                              reasoning_,
                              loras_ != nullptr ? loras_->Serving() : std::vector<LoraModule>()};
      ASSIGN_OR_RETURN(OpenAiRequest chat, ParseChatBody(body, model));
      params.prompt = std::move(chat.params.prompt);
      params.constraint = std::move(chat.params.constraint);
      out.chat = GrpcGenerate::ChatSplit{chat.reasoning, chat.tool_syntax, chat.include_reasoning};
      break;
    }
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return absl::InvalidArgumentError("the request has no prompt: set text, token_ids or chat");
  }
  ASSIGN_OR_RETURN(const LoraModule adapter, AdapterOf(request.model()));
  params.adapter = adapter.slot;
  params.adapter_generation = adapter.generation;
  params.max_tokens = request.max_tokens();
  params.sampling = FromProto(request.sampling(), default_sampling_);
  params.ignore_eos = request.ignore_eos();
  params.speculate = !request.no_speculation();
  params.stop_token_ids.assign(request.stop_token_ids().begin(), request.stop_token_ids().end());
  params.stop.assign(request.stop().begin(), request.stop().end());
  params.n = request.n() == 0 ? 1 : request.n();
  params.logprobs = request.has_logprobs() ? request.logprobs() : -1;
  if (!out.chat.has_value()) params.constraint = FromProto(request.constraint());
  // -1 means none inside; a client's -1 is out of range like any other.
  if (request.has_logprobs()) RETURN_IF_ERROR(CheckLogprobs(request.logprobs(), "logprobs"));
  return out;
}

grpc::ServerWriteReactor<v1::GenerateResponse>* InferenceServiceImpl::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return GenerateCall::Start(this, context, request);
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Score(grpc::CallbackServerContext* context,
                                                      const v1::ScoreRequest* request,
                                                      v1::ScoreResponse* response) {
  return ScoreCall::Start(this, context, request, response);
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Tokenize(grpc::CallbackServerContext* context,
                                                         const v1::TokenizeRequest* request,
                                                         v1::TokenizeResponse* response) {
  if (grpc::Status s = CheckKey(*context, "InferenceService.Tokenize"); !s.ok()) {
    return Answer(context, s);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // gRPC keeps request and response until Finish, which the task calls.
  const bool queued = pool_->TryPost([this, reactor, request, response] {
    // A serving cluster tokenizes no more than a prompt its context could hold; a coordinator
    // without workers (a tokenizer service) has no context, and the message size bounds the
    // text.
    const Engine* engine = engine_.load();
    absl::StatusOr<std::vector<int32_t>> ids =
        engine != nullptr
            ? EncodeBoundedPrompt(request->text(), engine->options().context_length, *tokenizer_)
            : tokenizer_->EncodePrompt(request->text());
    if (!ids.ok()) return reactor->Finish(ToGrpc(ids.status()));
    response->mutable_token_ids()->Add(ids->begin(), ids->end());
    reactor->Finish(grpc::Status::OK);
  });
  if (!queued) reactor->Finish(FrontEndBusy());
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ListModels(grpc::CallbackServerContext* context,
                                                           const v1::ListModelsRequest* request,
                                                           v1::ListModelsResponse* response) {
  if (grpc::Status s = CheckKey(*context, "InferenceService.ListModels"); !s.ok()) {
    return Answer(context, s);
  }
  Engine* engine = engine_.load();
  auto add = [&](const std::string& id, const std::string& parent) {
    v1::ListModelsResponse::Model* model = response->add_models();
    model->set_id(id);
    model->set_parent(parent);
    model->set_vocab_size(tokenizer_->vocab_size());
    if (engine != nullptr) model->set_context_length(engine->options().context_length);
  };
  add(model_name_, "");
  if (loras_ != nullptr) {
    for (const LoraModule& lora : loras_->Serving()) add(lora.name, model_name_);
  }
  return Answer(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Health(grpc::CallbackServerContext* context,
                                                       const v1::HealthRequest* request,
                                                       v1::HealthResponse* response) {
  response->set_world_size(world_size_);
  if (load_progress_ != nullptr) {
    response->set_load_done_bytes(load_progress_->done_bytes);
    response->set_load_total_bytes(load_progress_->total_bytes);
  }
  absl::StatusOr<Engine*> engine = GetEngine();
  if (!engine.ok()) {
    response->set_state(v1::HealthResponse::STATE_STARTING);
    response->set_message(std::string(engine.status().message()));
    return Answer(context, grpc::Status::OK);
  }
  absl::Status health = (*engine)->health();
  if (health.ok() && (*engine)->draining()) {
    response->set_state(v1::HealthResponse::STATE_DRAINING);
    response->set_message("accepting no new requests");
    return Answer(context, grpc::Status::OK);
  }
  response->set_state(health.ok() ? v1::HealthResponse::STATE_SERVING
                                  : v1::HealthResponse::STATE_DEGRADED);
  response->set_message(std::string(health.message()));
  return Answer(context, grpc::Status::OK);
}

}  // namespace tpserve
