#include "coordinator/inference_calls.h"

#include <utility>

#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/inference_wire.h"
#include "coordinator/tool_calls.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "inference";

grpc::Status ClientLeft() {
  return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
}

}  // namespace

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerateCall::Start(
    const InferenceServiceImpl* service, grpc::CallbackServerContext* context,
    const v1::GenerateRequest* request) {
  auto call = std::make_shared<GenerateCall>(service, context->peer(), *request);
  call->self_ = call;
  absl::MutexLock lock(&call->mutex_);
  if (grpc::Status s = service->CheckKey(*context, "InferenceService.Generate"); !s.ok()) {
    call->End(s, true);
  } else if (!service->pool().TryPost([call] { call->Submit(); })) {
    call->End(FrontEndBusy(), true);
  }
  return call.get();
}

void GenerateCall::Submit() {
  {
    absl::MutexLock lock(&mutex_);
    if (outcome_.has_value()) return;  // cancelled while queued
  }
  absl::StatusOr<std::shared_ptr<RequestHandle>> handle =
      [this]() -> absl::StatusOr<std::shared_ptr<RequestHandle>> {
    ASSIGN_OR_RETURN(Engine * engine, service_->GetEngine());
    ASSIGN_OR_RETURN(GrpcGenerate generate, service_->ToParams(request_, *engine));
    chat_ = generate.chat;
    return engine->SubmitGenerate(std::move(generate.params), [this] { return cancelled_.load(); });
  }();
  absl::MutexLock lock(&mutex_);
  if (!handle.ok()) {
    LogInfo(kLog, "Generate from %s refused: %s", peer_, handle.status().ToString());
    return End(ToGrpc(handle.status()), true);
  }
  handle_ = *std::move(handle);
  if (outcome_.has_value()) {
    handle_->Cancel();
    return;
  }
  // Sized by the samples the engine admitted (it checked n), never by the request's own n.
  if (chat_.has_value()) {
    streams_.assign(handle_->num_samples(),
                    ReplyStream(chat_->reasoning, chat_->tools, chat_->include_reasoning));
    calls_.assign(handle_->num_samples(), 0);
  }
  PumpOnNews(*handle_, service_->pool(), shared_from_this());
}

void GenerateCall::Pump() {
  absl::MutexLock lock(&mutex_);
  if (outcome_.has_value()) return;
  for (StreamUpdate& update : handle_->Take()) {
    if (update.done && !update.status.ok()) {
      handle_->Cancel();
      return End(ToGrpc(update.status), false);
    }
    v1::GenerateResponse chunk = ToChunk(update);
    if (chat_.has_value()) {
      const ReplyDelta delta = streams_[update.index].Next(update.text, update.done);
      SetChatReply(delta, handle_->request_id(), &calls_[update.index],
                   WantsMistralCallIds(chat_->tools), &chunk);
    }
    queue_.push_back(std::move(chunk));
  }
  if (handle_->finished()) return End(grpc::Status::OK, false);
  WriteNext();
}

void GenerateCall::WriteNext() {
  if (writing_ || finished_) return;
  if (!queue_.empty()) {
    writing_chunk_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    StartWrite(&writing_chunk_);
    return;
  }
  if (outcome_.has_value()) {
    finished_ = true;
    Finish(*outcome_);
  }
}

void GenerateCall::End(grpc::Status status, bool drop_queue) {
  if (!outcome_.has_value()) outcome_ = std::move(status);
  if (drop_queue) queue_.clear();
  WriteNext();
}

void GenerateCall::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mutex_);
  writing_ = false;
  if (!ok) {
    cancelled_ = true;
    if (handle_ != nullptr) handle_->Cancel();
    return End(ClientLeft(), true);
  }
  WriteNext();
}

void GenerateCall::OnCancel() {
  cancelled_ = true;
  absl::MutexLock lock(&mutex_);
  if (handle_ != nullptr) handle_->Cancel();
  End(ClientLeft(), true);
}

void GenerateCall::OnDone() {
  std::shared_ptr<GenerateCall> last;
  {
    absl::MutexLock lock(&mutex_);
    last = std::move(self_);
  }
}

grpc::ServerUnaryReactor* ScoreCall::Start(const InferenceServiceImpl* service,
                                           grpc::CallbackServerContext* context,
                                           const v1::ScoreRequest* request,
                                           v1::ScoreResponse* response) {
  auto call = std::make_shared<ScoreCall>(
      service, std::vector<int32_t>(request->prompt().ids().begin(), request->prompt().ids().end()),
      request->model(), response);
  call->self_ = call;
  absl::MutexLock lock(&call->mutex_);
  if (grpc::Status s = service->CheckKey(*context, "InferenceService.Score"); !s.ok()) {
    call->End(s);
  } else if (!service->pool().TryPost([call] { call->Submit(); })) {
    call->End(FrontEndBusy());
  }
  return call.get();
}

void ScoreCall::Submit() {
  {
    absl::MutexLock lock(&mutex_);
    if (finished_) return;
  }
  absl::StatusOr<std::shared_ptr<RequestHandle>> handle =
      [this]() -> absl::StatusOr<std::shared_ptr<RequestHandle>> {
    ASSIGN_OR_RETURN(Engine * engine, service_->GetEngine());
    ASSIGN_OR_RETURN(const LoraModule adapter, service_->AdapterOf(model_));
    return engine->SubmitScore(prompt_, adapter.slot, adapter.generation);
  }();
  absl::MutexLock lock(&mutex_);
  if (!handle.ok()) return End(ToGrpc(handle.status()));
  handle_ = *std::move(handle);
  if (finished_) {
    handle_->Cancel();
    return;
  }
  PumpOnNews(*handle_, service_->pool(), shared_from_this());
}

void ScoreCall::Pump() {
  absl::MutexLock lock(&mutex_);
  if (finished_) return;
  for (StreamUpdate& update : handle_->Take()) {
    if (!update.done) continue;
    if (!update.status.ok()) return End(ToGrpc(update.status));
    const size_t vocab = update.logits.size() / prompt_.size();
    const float* logits = update.logits.data();
    for (size_t i = 0; i < prompt_.size(); ++i) {
      response_->add_positions()->mutable_logits()->Add(logits + i * vocab,
                                                        logits + (i + 1) * vocab);
    }
    return End(grpc::Status::OK);
  }
}

void ScoreCall::End(grpc::Status status) {
  if (finished_) return;
  finished_ = true;
  Finish(std::move(status));
}

void ScoreCall::OnCancel() {
  absl::MutexLock lock(&mutex_);
  if (handle_ != nullptr) handle_->Cancel();
  End(ClientLeft());
}

void ScoreCall::OnDone() {
  std::shared_ptr<ScoreCall> last;
  {
    absl::MutexLock lock(&mutex_);
    last = std::move(self_);
  }
}

}  // namespace tpserve
