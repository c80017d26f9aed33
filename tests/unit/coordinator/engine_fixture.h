// The engine's test fixture: the coordinator's request path (InferenceService → Engine →
// WorkerPool) over real gRPC, with fake workers standing in for the model (see fake_worker.h).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "coordinator/heartbeat_monitor.h"
#include "coordinator/inference_service.h"
#include "coordinator/worker_pool.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "model/detokenizer.h"
#include "tests/unit/coordinator/bundled_model.h"
#include "tests/unit/coordinator/fake_worker.h"

namespace tpserve::testing {

struct Generated {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish_reason;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
};

inline std::vector<int32_t> Expected(std::vector<int32_t> context, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(FakeWorker::NextToken(context));
    context.push_back(out.back());
  }
  return out;
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = BundledTokenizer();
    ASSERT_NE(tokenizer_, nullptr);
  }

  // Starts fakes (one per entry), the pool, the engine and the service.
  void StartWorkers(std::vector<FakeWorkerOptions> ranks) {
    std::vector<RegisteredWorker> registered;
    for (size_t r = 0; r < ranks.size(); ++r) {
      fakes_.push_back(std::make_unique<FakeWorker>(ranks[r]));
      registered.push_back({static_cast<int>(r), fakes_.back()->address(), "fake", 0});
    }
    pool_ = std::make_unique<WorkerPool>(registered);
    WorkerInitOptions init;
    init.group_id = "test";
    init.block_size = block_size_;
    ASSERT_TRUE(pool_->Init(init, absl::Seconds(5)).ok());
  }
  void StartEngine(const LoadedModel& loaded, EngineOptions options) {
    options.block_size = block_size_;
    options.clock = [this] { return clock_.Now(); };
    options.num_blocks = static_cast<int32_t>(loaded.kv_cache_blocks);
    options.context_length = loaded.context_length;
    options.vocab_size = loaded.vocab_size;
    engine_ = std::make_unique<Engine>(options, pool_.get(), tokenizer_);
    if (reform_) engine_->SetGroupReformer(reform_);
    engine_->Start();
    service_ = std::make_unique<InferenceServiceImpl>(tokenizer_, &front_end_, pool_->world_size(),
                                                      "test-model");
    service_->SetEngine(engine_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
    stub_ = v1::InferenceService::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args));
  }
  void Start(std::vector<FakeWorkerOptions> ranks, EngineOptions options = {}) {
    StartWorkers(std::move(ranks));
    auto loaded = pool_->LoadShard(absl::Seconds(5));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    StartEngine(*loaded, options);
  }

  void TearDown() override {
    fakes_.clear();  // releases hanging steps
    if (engine_) engine_->Stop();
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    for (const auto& fake : fakes_) EXPECT_THAT(fake->errors(), ::testing::IsEmpty());
  }
  void ExpectConsistentSteps() {
    for (const auto& fake : fakes_) EXPECT_THAT(fake->errors(), ::testing::IsEmpty());
  }

  Generated Generate(const v1::GenerateRequest& request) {
    Generated out;
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, request);
    v1::GenerateResponse chunk;
    while (reader->Read(&chunk)) {
      out.tokens.insert(out.tokens.end(), chunk.token_ids().begin(), chunk.token_ids().end());
      out.text += chunk.text();
      if (!chunk.finish_reason().empty()) {
        out.finish_reason = chunk.finish_reason();
        out.prompt_tokens = chunk.usage().prompt_tokens();
        out.completion_tokens = chunk.usage().completion_tokens();
        out.cached_prompt_tokens = chunk.usage().cached_prompt_tokens();
      }
    }
    out.status = reader->Finish();
    return out;
  }
  static v1::GenerateRequest Request(std::vector<int32_t> prompt, int max_tokens) {
    v1::GenerateRequest request;
    request.mutable_token_ids()->mutable_ids()->Add(prompt.begin(), prompt.end());
    request.set_max_tokens(max_tokens);
    return request;
  }

  // A group re-formation that succeeds once `rank_back_` is set: the fakes get Init again, which
  // empties them as a restarted group's workers are.
  void ReformWhenTheRankIsBack() {
    reform_ = [this]() -> absl::Status {
      if (!rank_back_.load()) return absl::UnavailableError("waiting for rank 2 to register");
      WorkerInitOptions init;
      init.group_id = "test-reformed";
      init.block_size = block_size_;
      return pool_->Init(init, absl::Seconds(5));
    };
  }
  // Three fakes, rank 2 failing step `step` once; the engine holds requests for `grace` and the
  // group re-forms once rank_back_ is set.
  void StartWithRank2FailingAt(uint64_t step, absl::Duration grace, EngineOptions options = {}) {
    FakeWorkerOptions failing;
    failing.fail_at_step = step;
    options.recovery_grace = grace;
    ReformWhenTheRankIsBack();
    Start({{}, {}, failing}, options);
  }
  // Waits until the engine holds `n` samples for the group to re-form.
  void AwaitHeld(int32_t n) {
    ASSERT_TRUE(engine_->AwaitStats([n](const EngineStats& s) { return s.num_held == n; },
                                    absl::Now() + absl::Seconds(10)))
        << engine_->stats().num_held << " held";
  }
  void AwaitRunning(int32_t n) {
    ASSERT_TRUE(engine_->AwaitStats([n](const EngineStats& s) { return s.num_running == n; },
                                    absl::Now() + absl::Seconds(10)))
        << engine_->stats().num_running << " running";
  }

  // The engine's clock for the failure model (the recovery grace), moved by the tests.
  class Clock {
   public:
    absl::Time Now() {
      absl::MutexLock lock(&mutex_);
      return now_;
    }
    void Advance(absl::Duration by) {
      absl::MutexLock lock(&mutex_);
      now_ += by;
    }

   private:
    absl::Mutex mutex_;
    absl::Time now_ = absl::FromUnixSeconds(1'000'000);
  };
  Clock clock_;

  static inline const Tokenizer* tokenizer_ = nullptr;
  std::function<absl::Status()> reform_;
  std::atomic<bool> rank_back_{false};
  int32_t block_size_ = 4;
  FrontEndPool front_end_{2, 64};
  std::vector<std::unique_ptr<FakeWorker>> fakes_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<InferenceServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::InferenceService::Stub> stub_;
};

}  // namespace tpserve::testing
