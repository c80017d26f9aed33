// The reactors of InferenceService's calls that wait on the engine: Generate streams each
// sample's news as it arrives, Score answers once the logits are in. Each owns itself from
// Start() until gRPC is done with it (OnDone); the engine's notifier reaches it through a weak
// reference, so news for a call that is over goes nowhere.
//
// Threads: gRPC's callbacks, and FrontEndPool tasks for submitting and for the engine's news;
// one mutex orders them.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/inference_service.h"
#include "coordinator/reply_stream.h"
#include "coordinator/request_handle.h"
#include "grpcpp/grpcpp.h"
#include "tpserve/v1/inference.pb.h"

namespace tpserve {

class GenerateCall final : public grpc::ServerWriteReactor<v1::GenerateResponse>,
                           public std::enable_shared_from_this<GenerateCall> {
 public:
  // The request is copied: gRPC frees its own once the call is done, which a cancelled call
  // can be while the pool still tokenizes it.
  GenerateCall(const InferenceServiceImpl* service, std::string peer, v1::GenerateRequest request)
      : service_(service), peer_(std::move(peer)), request_(std::move(request)) {}

  // Queues the submission (or refuses the call when the pool is full); returns the reactor.
  static grpc::ServerWriteReactor<v1::GenerateResponse>* Start(const InferenceServiceImpl* service,
                                                               grpc::CallbackServerContext* context,
                                                               const v1::GenerateRequest* request);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;
  // Pool: turns the news into chunks and writes them.
  void Pump();

 private:
  // Pool: tokenizes, submits, and subscribes to the handle's news.
  void Submit();
  // Writes the next chunk, or finishes once none is left and the outcome is known.
  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Ends the call with `status` once what is queued is written (an error drops the queue).
  void End(grpc::Status status, bool drop_queue) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const InferenceServiceImpl* const service_;
  const std::string peer_;
  const v1::GenerateRequest request_;
  std::shared_ptr<GenerateCall> self_;  // until OnDone
  std::atomic<bool> cancelled_{false};

  absl::Mutex mutex_;
  std::shared_ptr<RequestHandle> handle_ ABSL_GUARDED_BY(mutex_);
  // Chat prompts: how the text is split, each sample's stream and its calls so far (set before
  // the request is submitted, read by Pump).
  std::optional<GrpcGenerate::ChatSplit> chat_;
  std::vector<ReplyStream> streams_;
  std::vector<int32_t> calls_;
  std::deque<v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mutex_);
  v1::GenerateResponse writing_chunk_ ABSL_GUARDED_BY(mutex_);
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;
  std::optional<grpc::Status> outcome_ ABSL_GUARDED_BY(mutex_);
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;  // Finish called
};

class ScoreCall final : public grpc::ServerUnaryReactor,
                        public std::enable_shared_from_this<ScoreCall> {
 public:
  // `response` is written only before Finish, so gRPC's stays valid; the prompt is copied.
  ScoreCall(const InferenceServiceImpl* service, std::vector<int32_t> prompt, std::string model,
            v1::ScoreResponse* response)
      : service_(service),
        prompt_(std::move(prompt)),
        model_(std::move(model)),
        response_(response) {}

  static grpc::ServerUnaryReactor* Start(const InferenceServiceImpl* service,
                                         grpc::CallbackServerContext* context,
                                         const v1::ScoreRequest* request,
                                         v1::ScoreResponse* response);

  void OnCancel() override;
  void OnDone() override;
  void Pump();

 private:
  void Submit();
  void End(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const InferenceServiceImpl* const service_;
  const std::vector<int32_t> prompt_;
  const std::string model_;  // the base model or a LoRA adapter
  v1::ScoreResponse* const response_;
  std::shared_ptr<ScoreCall> self_;  // until OnDone

  absl::Mutex mutex_;
  std::shared_ptr<RequestHandle> handle_ ABSL_GUARDED_BY(mutex_);
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
};

// Subscribes `call` to `handle`'s news: each notice queues call->Pump() on the pool, if the call
// still exists.
template <typename Call>
void PumpOnNews(RequestHandle& handle, FrontEndPool& pool, const std::shared_ptr<Call>& call) {
  handle.SetNotifier([&pool, weak = std::weak_ptr<Call>(call)] {
    pool.Post([weak] {
      if (std::shared_ptr<Call> live = weak.lock()) live->Pump();
    });
  });
}

}  // namespace tpserve
