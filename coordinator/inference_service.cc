#include "coordinator/inference_service.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/sample_streams.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "inference";
// How often a call waiting on the engine looks at its client's cancellation.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(50);

// Unset fields take `defaults`; an unset seed a random one.
SamplingParams FromProto(const v1::Sampling& s, SamplingParams p) {
  if (s.has_temperature()) p.temperature = s.temperature();
  if (s.has_top_k()) p.top_k = s.top_k();
  if (s.has_top_p()) p.top_p = s.top_p();
  if (s.has_min_p()) p.min_p = s.min_p();
  if (s.has_repetition_penalty()) p.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) p.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.frequency_penalty = s.frequency_penalty();
  p.seed = s.has_seed() ? s.seed() : RandomSamplingSeed();
  return p;
}

OutputConstraint FromProto(const v1::OutputConstraint& c) {
  OutputConstraint out;
  switch (c.kind_case()) {
    case v1::OutputConstraint::kJsonObject:
      if (c.json_object()) out.kind = OutputConstraint::Kind::kJson;
      out.param = "constraint.json_object";
      break;
    case v1::OutputConstraint::kJsonSchema:
      out.kind = OutputConstraint::Kind::kJsonSchema;
      out.spec = c.json_schema();
      out.param = "constraint.json_schema";
      break;
    case v1::OutputConstraint::kRegex:
      out.kind = OutputConstraint::Kind::kRegex;
      out.spec = c.regex();
      out.param = "constraint.regex";
      break;
    case v1::OutputConstraint::kChoice:
      out.kind = OutputConstraint::Kind::kChoice;
      out.choices.assign(c.choice().choices().begin(), c.choice().choices().end());
      out.param = "constraint.choice";
      break;
    case v1::OutputConstraint::kGrammar:
      out.kind = OutputConstraint::Kind::kGrammar;
      out.spec = c.grammar();
      out.param = "constraint.grammar";
      break;
    case v1::OutputConstraint::KIND_NOT_SET:
      break;
  }
  return out;
}

v1::GenerateResponse ToChunk(const StreamUpdate& update, int32_t index) {
  v1::GenerateResponse chunk;
  chunk.set_index(index);
  chunk.mutable_token_ids()->Add(update.token_ids.begin(), update.token_ids.end());
  chunk.set_text(update.text);
  for (const TokenLogprob& logprob : update.logprobs) {
    v1::TokenLogprob* out = chunk.add_logprobs();
    out->set_token_id(logprob.token_id);
    out->set_logprob(logprob.logprob);
    for (const auto& [id, value] : logprob.top) {
      v1::TokenLogprob::Alternative* alternative = out->add_top();
      alternative->set_token_id(id);
      alternative->set_logprob(value);
    }
  }
  if (update.done) {
    chunk.set_finish_reason(FinishReasonName(*update.finish_reason));
    chunk.mutable_usage()->set_prompt_tokens(update.prompt_tokens);
    chunk.mutable_usage()->set_completion_tokens(update.completion_tokens);
    chunk.mutable_usage()->set_cached_prompt_tokens(update.cached_prompt_tokens);
  }
  return chunk;
}

}  // namespace

InferenceServiceImpl::InferenceServiceImpl(const Tokenizer* tokenizer, int world_size,
                                           std::string model_name, SamplingParams default_sampling)
    : tokenizer_(tokenizer),
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

absl::StatusOr<GenerateParams> InferenceServiceImpl::ToParams(
    const v1::GenerateRequest& request, const Engine& engine) const {
  GenerateParams params;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText: {
      ASSIGN_OR_RETURN(params.prompt, EncodeBoundedPrompt(request.text(),
                                                          engine.options().context_length,
                                                          *tokenizer_));
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      params.prompt.assign(request.token_ids().ids().begin(), request.token_ids().ids().end());
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return absl::InvalidArgumentError("the request has no prompt: set text or token_ids");
  }
  params.max_tokens = request.max_tokens();
  params.sampling = FromProto(request.sampling(), default_sampling_);
  params.ignore_eos = request.ignore_eos();
  params.speculate = !request.no_speculation();
  params.stop_token_ids.assign(request.stop_token_ids().begin(), request.stop_token_ids().end());
  params.stop.assign(request.stop().begin(), request.stop().end());
  params.n = request.n() == 0 ? 1 : request.n();
  params.logprobs = request.has_logprobs() ? request.logprobs() : -1;
  params.constraint = FromProto(request.constraint());
  if (request.has_logprobs() && request.logprobs() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs = ", request.logprobs(), " is negative"));
  }
  return params;
}

absl::StatusOr<StreamUpdate> InferenceServiceImpl::WaitDone(grpc::ServerContext* context,
                                                            RequestStream& stream) {
  while (true) {
    StreamUpdate update = stream.Wait(kCancelPoll);
    if (update.done) return update;
    if (context->IsCancelled()) {
      stream.Cancel();
      return absl::CancelledError("the client cancelled the call");
    }
  }
}

grpc::Status InferenceServiceImpl::Generate(grpc::ServerContext* context,
                                            const v1::GenerateRequest* request,
                                            grpc::ServerWriter<v1::GenerateResponse>* writer) {
  if (grpc::Status s = CheckKey(*context, "InferenceService.Generate"); !s.ok()) return s;
  absl::StatusOr<Engine*> engine = GetEngine();
  if (!engine.ok()) return ToGrpc(engine.status());
  absl::StatusOr<GenerateParams> params = ToParams(*request, **engine);
  if (!params.ok()) return ToGrpc(params.status());
  absl::StatusOr<std::vector<std::shared_ptr<RequestStream>>> stream =
      (*engine)->SubmitGenerate(*std::move(params), [context] { return context->IsCancelled(); });
  if (!stream.ok()) {
    LogInfo(kLog, "Generate from %s refused: %s", context->peer(), stream.status().ToString());
    return ToGrpc(stream.status());
  }
  SampleStreams samples(*std::move(stream));
  while (!samples.done()) {
    std::optional<SampleStreams::News> news = samples.Next(kCancelPoll);
    if (news.has_value()) {
      if (news->update.done && !news->update.status.ok()) {
        samples.CancelAll();
        return ToGrpc(news->update.status);
      }
      if (!writer->Write(ToChunk(news->update, news->index))) {
        samples.CancelAll();
        return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    }
    if (context->IsCancelled()) {
      samples.CancelAll();
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
    }
  }
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::Tokenize(grpc::ServerContext* context,
                                            const v1::TokenizeRequest* request,
                                            v1::TokenizeResponse* response) {
  if (grpc::Status s = CheckKey(*context, "InferenceService.Tokenize"); !s.ok()) return s;
  // A serving cluster tokenizes no more than a prompt its context could hold; a coordinator
  // without workers (a tokenizer service) has no context, and the message size bounds the text.
  const Engine* engine = engine_.load();
  absl::StatusOr<std::vector<int32_t>> ids =
      engine != nullptr
          ? EncodeBoundedPrompt(request->text(), engine->options().context_length, *tokenizer_)
          : tokenizer_->EncodePrompt(request->text());
  if (!ids.ok()) return ToGrpc(ids.status());
  response->mutable_token_ids()->Add(ids->begin(), ids->end());
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::ListModels(grpc::ServerContext* context,
                                              const v1::ListModelsRequest* request,
                                              v1::ListModelsResponse* response) {
  if (grpc::Status s = CheckKey(*context, "InferenceService.ListModels"); !s.ok()) return s;
  v1::ListModelsResponse::Model* model = response->add_models();
  model->set_id(model_name_);
  model->set_vocab_size(tokenizer_->vocab_size());
  if (Engine* engine = engine_.load(); engine != nullptr) {
    model->set_context_length(engine->options().context_length);
  }
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::Score(grpc::ServerContext* context,
                                         const v1::ScoreRequest* request,
                                         v1::ScoreResponse* response) {
  if (grpc::Status s = CheckKey(*context, "InferenceService.Score"); !s.ok()) return s;
  absl::StatusOr<Engine*> engine = GetEngine();
  if (!engine.ok()) return ToGrpc(engine.status());
  std::vector<int32_t> prompt(request->prompt().ids().begin(), request->prompt().ids().end());
  absl::StatusOr<std::shared_ptr<RequestStream>> stream = (*engine)->SubmitScore(prompt);
  if (!stream.ok()) return ToGrpc(stream.status());
  absl::StatusOr<StreamUpdate> update = WaitDone(context, **stream);
  if (!update.ok()) return ToGrpc(update.status());
  if (!update->status.ok()) return ToGrpc(update->status);
  const int64_t vocab = (*engine)->options().vocab_size;
  const float* logits = update->logits.data();
  for (size_t i = 0; i < prompt.size(); ++i) {
    response->add_positions()->mutable_logits()->Add(logits + i * vocab, logits + (i + 1) * vocab);
  }
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::Health(grpc::ServerContext* context,
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
    return grpc::Status::OK;
  }
  absl::Status health = (*engine)->health();
  if (health.ok() && (*engine)->draining()) {
    response->set_state(v1::HealthResponse::STATE_DRAINING);
    response->set_message("accepting no new requests");
    return grpc::Status::OK;
  }
  response->set_state(health.ok() ? v1::HealthResponse::STATE_SERVING
                                  : v1::HealthResponse::STATE_DEGRADED);
  response->set_message(std::string(health.message()));
  return grpc::Status::OK;
}

}  // namespace tpserve
