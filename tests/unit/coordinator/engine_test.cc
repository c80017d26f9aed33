// The coordinator's request path (InferenceService → Engine → WorkerPool) over real gRPC, with
// fake workers standing in for the model (see fake_worker.h).
#include "coordinator/engine.h"

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
namespace {

using ::testing::HasSubstr;

struct Generated {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish_reason;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
};

std::vector<int32_t> Expected(std::vector<int32_t> context, int n) {
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

  static const Tokenizer* tokenizer_;
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

const Tokenizer* EngineTest::tokenizer_ = nullptr;

TEST_F(EngineTest, GenerateStreamsUntilMaxTokens) {
  Start({{}, {}, {}});
  const std::vector<int32_t> prompt = {300, 301, 302, 303, 304, 305};
  Generated out = Generate(Request(prompt, 9));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens, Expected(prompt, 9));
  // Random byte tokens make invalid UTF-8: compare with one detokenizer over all the tokens.
  IncrementalDetokenizer detokenizer(*tokenizer_);
  std::string text;
  for (int32_t id : out.tokens) text += detokenizer.Add(id);
  EXPECT_EQ(out.text, text + detokenizer.Flush());
  EXPECT_EQ(out.finish_reason, "length");
  EXPECT_EQ(out.prompt_tokens, 6);
  EXPECT_EQ(out.completion_tokens, 9);
  ExpectConsistentSteps();
}

TEST_F(EngineTest, StopTokenEndsGenerationAndIsNotStreamed) {
  Start({{}, {}});
  const std::vector<int32_t> prompt = {500, 501};
  const std::vector<int32_t> expected = Expected(prompt, 5);
  v1::GenerateRequest request = Request(prompt, 20);
  request.add_stop_token_ids(expected[2]);
  Generated out = Generate(request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.tokens, std::vector<int32_t>(expected.begin(), expected.begin() + 2));
  EXPECT_EQ(out.finish_reason, "stop");
  EXPECT_EQ(out.completion_tokens, 3);
}

TEST_F(EngineTest, ConcurrentRequestsSurvivePreemption) {
  // 8 blocks of 4 tokens; each request grows to 5 + 14 = 19 tokens (5 blocks).
  FakeWorkerOptions small;
  small.kv_cache_blocks = 8;
  Start({small, small, small});
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back({200 + i, 210 + i, 220, 230, 240 + i});
  std::vector<Generated> outs(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] { outs[i] = Generate(Request(prompts[i], 14)); });
  }
  for (auto& client : clients) client.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << i << ": " << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, Expected(prompts[i], 14)) << i;
  }
  ExpectConsistentSteps();
}

// The fake workers check that a sequence starting past position 0 finds its prefix in the blocks
// it was given exactly as an earlier sequence wrote it.
TEST_F(EngineTest, SharedPrefixRunsFromCachedBlocks) {
  Start({{}, {}, {}});
  std::vector<int32_t> system(13);
  for (int i = 0; i < 13; ++i) system[i] = 400 + i;
  std::vector<int32_t> first = system, second = system;
  first.insert(first.end(), {700, 701});
  second.insert(second.end(), {800, 801, 802});
  Generated a = Generate(Request(first, 6));
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  EXPECT_EQ(a.cached_prompt_tokens, 0);
  Generated b = Generate(Request(second, 6));
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_EQ(b.cached_prompt_tokens, 12);  // three whole blocks of 4 of the 13 shared tokens
  EXPECT_EQ(b.tokens, Expected(second, 6));
  // The same 16-token prompt again: the last token always runs, so the whole blocks before it
  // (12 tokens) come from the cache, and the text is the same.
  Generated c = Generate(Request(second, 6));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.cached_prompt_tokens, 12);
  EXPECT_EQ(c.tokens, b.tokens);
  ExpectConsistentSteps();
}

TEST_F(EngineTest, StopStringEndsGenerationAndIsNotReturned) {
  Start({{}, {}});
  const std::vector<int32_t> prompt = {600, 601, 602};
  Generated full = Generate(Request(prompt, 16));
  ASSERT_TRUE(full.status.ok()) << full.status.error_message();
  ASSERT_GE(full.text.size(), 12u);
  // Three characters from the middle, which may well span two tokens.
  size_t at = full.text.size() / 2;
  while (at > 0 && (full.text[at] & 0xC0) == 0x80) --at;  // start on a character
  const std::string stop = full.text.substr(at, 3);
  at = full.text.find(stop);
  v1::GenerateRequest request = Request(prompt, 16);
  request.add_stop(stop);
  request.add_stop("a stop string that never occurs");
  Generated out = Generate(request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.text, full.text.substr(0, at)) << "stop string '" << stop << "'";
  EXPECT_EQ(out.finish_reason, "stop");
  EXPECT_LT(out.tokens.size(), full.tokens.size());
  EXPECT_EQ(out.tokens,
            std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + out.tokens.size()));
}

TEST_F(EngineTest, NSamplesStreamUnderTheirIndexAndShareThePrompt) {
  Start({{}, {}});
  const std::vector<int32_t> prompt = {310, 311, 312, 313, 314, 315, 316, 317, 318};
  v1::GenerateRequest request = Request(prompt, 5);
  request.set_n(3);
  grpc::ClientContext context;
  auto reader = stub_->Generate(&context, request);
  std::vector<std::vector<int32_t>> tokens(3);
  std::vector<int32_t> cached(3, -1);
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
    ASSERT_GE(chunk.index(), 0);
    ASSERT_LT(chunk.index(), 3);
    auto& sample = tokens[chunk.index()];
    sample.insert(sample.end(), chunk.token_ids().begin(), chunk.token_ids().end());
    if (!chunk.finish_reason().empty()) {
      cached[chunk.index()] = chunk.usage().cached_prompt_tokens();
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  // The fake model ignores the seed: every sample continues the same way.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tokens[i], Expected(prompt, 5)) << "sample " << i;
  EXPECT_EQ(cached[0], 0);
  EXPECT_EQ(cached[1], 8);  // the two whole blocks of the first sample's prompt
  EXPECT_EQ(cached[2], 8);
  ExpectConsistentSteps();
}

TEST_F(EngineTest, FullQueueRefusesWithResourceExhausted) {
  FakeWorkerOptions hang;
  hang.hang_at_step = 1;
  EngineOptions options;
  options.max_queued_requests = 1;
  Start({hang}, options);
  std::thread running([&] { Generate(Request({300, 301}, 4)); });
  AwaitRunning(1);  // step 1 hangs on the worker
  std::thread queued([&] { Generate(Request({302, 303}, 4)); });
  ASSERT_TRUE(engine_->AwaitStats([](const EngineStats& s) { return s.num_submitted == 1; },
                                  absl::Now() + absl::Seconds(10)));  // queued behind the step
  const Generated refused = Generate(Request({304}, 4));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("--max-queued-requests 1"));
  fakes_.clear();  // releases the step: the cluster degrades and both requests end
  running.join();
  queued.join();
}

TEST_F(EngineTest, DrainRefusesNewRequestsAndStaysHealthy) {
  Start({{}});
  EXPECT_EQ(engine_->Drain(), 0);
  EXPECT_TRUE(engine_->draining());
  EXPECT_TRUE(engine_->health().ok());
  Generated out = Generate(Request({300, 301}, 4));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(out.status.error_message(), HasSubstr("draining"));
}

TEST_F(EngineTest, WaitIdleWaitsForTheDrainAndFailInFlightEndsWhatIsLeft) {
  FakeWorkerOptions hang;
  hang.hang_at_step = 3;
  Start({hang});
  EXPECT_TRUE(engine_->WaitIdle(absl::Now()));
  Generated out;
  std::thread running([&] { out = Generate(Request({300, 301}, 50)); });
  AwaitRunning(1);
  EXPECT_EQ(engine_->Drain("rank 0 is shutting down", /*until_reformed=*/true), 1);
  EXPECT_FALSE(engine_->WaitIdle(absl::Now() + absl::Milliseconds(300)));  // step 3 hangs
  const Generated refused = Generate(Request({302}, 4));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("rank 0 is shutting down"));
  engine_->FailInFlight(absl::UnavailableError("rank 0 left before this request finished"));
  fakes_.clear();  // releases the step
  running.join();
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(out.status.error_message(), HasSubstr("rank 0 left before this request finished"));
  EXPECT_TRUE(engine_->WaitIdle(absl::Now() + absl::Seconds(5)));
}

TEST_F(EngineTest, FlushPrefixCacheEvictsWhatNoRequestUses) {
  Start({{}});
  ASSERT_TRUE(Generate(Request({300, 301, 302, 303, 304, 305, 306, 307, 308}, 4)).status.ok());
  absl::StatusOr<int32_t> evicted = engine_->FlushPrefixCache();
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_EQ(*evicted, 3);  // 12 computed positions: three whole blocks of 4
  EXPECT_EQ(*engine_->FlushPrefixCache(), 0);
}

TEST_F(EngineTest, ScoreReturnsLogitsOfEveryPosition) {
  FakeWorkerOptions options;
  options.vocab_size = 1000;  // FakeWorker::NextToken draws from [100, 1000)
  Start({options, options, options});
  v1::ScoreRequest request;
  for (int32_t t : {7, 8, 9, 10, 11}) request.mutable_prompt()->add_ids(t);
  v1::ScoreResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub_->Score(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.positions_size(), 5);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(response.positions(i).logits_size(), 1000);
    EXPECT_FLOAT_EQ(response.positions(i).logits(3), FakeWorker::Logit(7 + i, 3));
  }
  // The scored sequence is dropped on the workers with the next step.
  Generated out = Generate(Request({400}, 2));
  ASSERT_TRUE(out.status.ok());
  ExpectConsistentSteps();
}

TEST_F(EngineTest, BadRequestsAreInvalidArgumentAndTheServerKeepsServing) {
  FakeWorkerOptions options;
  options.context_length = 32;
  Start({options});
  Generated too_long = Generate(Request(std::vector<int32_t>(33, 300), 1));
  EXPECT_EQ(too_long.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_long.status.error_message(), HasSubstr("context length is 32"));
  Generated bad_token = Generate(Request({300, 1 << 30}, 1));
  EXPECT_EQ(bad_token.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest bad_top_p = Request({300}, 1);
  bad_top_p.mutable_sampling()->set_top_p(1.5f);
  EXPECT_EQ(Generate(bad_top_p).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Generate(v1::GenerateRequest()).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Prompt + max_tokens past the context is refused naming both numbers, as vLLM does; up to it
  // the request runs to max_tokens.
  Generated over = Generate(Request(std::vector<int32_t>(28, 300), 5));
  EXPECT_EQ(over.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(over.status.error_message(), HasSubstr("maximum context length is 32"));
  EXPECT_THAT(over.status.error_message(), HasSubstr("33 (28 in the prompt, 5 in the completion)"));
  Generated full = Generate(Request(std::vector<int32_t>(27, 300), 5));
  ASSERT_TRUE(full.status.ok()) << full.status.error_message();
  EXPECT_EQ(full.tokens.size(), 5u);
  EXPECT_EQ(full.finish_reason, "length");
}

TEST_F(EngineTest, TextPromptIsTokenized) {
  Start({{}});
  v1::GenerateRequest request;
  request.set_text("Hello world");
  request.set_max_tokens(3);
  Generated out = Generate(request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  auto ids = tokenizer_->Encode("Hello world", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(out.prompt_tokens, static_cast<int32_t>(ids->size()) + (tokenizer_->add_bos() ? 1 : 0));
  EXPECT_EQ(out.tokens.size(), 3u);
}

// A worker that refuses a step for one sequence's data fails that request alone: the other
// sequences' work runs as the next step, and the cluster is never degraded.
TEST_F(EngineTest, AStepRefusedForOneSequenceFailsItAlone) {
  FakeWorkerOptions refusing;
  refusing.refuse_token = 666;
  Start({refusing, refusing, refusing});
  Generated other;
  std::thread beside([&] { other = Generate(Request({300, 301, 302}, 12)); });
  Generated refused = Generate(Request({300, 666}, 12));
  beside.join();
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("injected refusal"));
  ASSERT_TRUE(other.status.ok()) << other.status.error_message();
  EXPECT_EQ(other.completion_tokens, 12);
  grpc::ClientContext context;
  v1::HealthResponse health;
  ASSERT_TRUE(stub_->Health(&context, v1::HealthRequest(), &health).ok());
  EXPECT_EQ(health.state(), v1::HealthResponse::STATE_SERVING);
  EXPECT_EQ(engine_->stats().recovery.recoveries, 0);
  EXPECT_TRUE(Generate(Request({300, 301}, 4)).status.ok());
  ExpectConsistentSteps();
}

TEST_F(EngineTest, FailedStepDegradesTheCluster) {
  FakeWorkerOptions failing;
  failing.fail_at_step = 3;
  Start({{}, {}, failing});
  Generated out = Generate(Request({300, 301}, 10));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(out.status.error_message(), HasSubstr("rank 2"));
  EXPECT_THAT(out.status.error_message(), HasSubstr("injected failure"));
  EXPECT_THAT(out.status.error_message(), ::testing::Not(HasSubstr("rank 0")));

  grpc::ClientContext context;
  v1::HealthResponse health;
  ASSERT_TRUE(stub_->Health(&context, v1::HealthRequest(), &health).ok());
  EXPECT_EQ(health.state(), v1::HealthResponse::STATE_DEGRADED);
  EXPECT_THAT(health.message(), HasSubstr("rank 2"));

  Generated refused = Generate(Request({300}, 1));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("cluster degraded: "));
}

// Within the recovery grace a failed step holds the requests in flight: when the group re-forms
// they recompute on the emptied workers (which check every cached prefix and position) and go
// on, each stream exactly the continuation it would have been without the failure.
TEST_F(EngineTest, HeldRequestsResumeWhereTheyStoppedWhenTheGroupReforms) {
  EngineOptions options;
  options.max_queued_requests = 5;
  StartWithRank2FailingAt(6, absl::Seconds(60), options);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back({200 + i, 210 + i, 220, 230, 240 + i});
  std::vector<Generated> outs(prompts.size() + 1);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] { outs[i] = Generate(Request(prompts[i], 12)); });
  }
  AwaitHeld(3);
  const absl::Status health = engine_->health();
  EXPECT_EQ(health.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(health.message(), HasSubstr("rank 2"));
  EXPECT_THAT(health.message(), HasSubstr("held"));
  const std::optional<Engine::Pause> pause = engine_->pause();
  ASSERT_TRUE(pause.has_value());
  EXPECT_GT(pause->grace_left, absl::Seconds(50));
  EXPECT_EQ(engine_->stats().blocks_used(), 0);  // their KV is gone with the group

  // A new request queues behind them (max_queued_requests allows it) and waits too.
  const std::vector<int32_t> late = {250, 251, 252};
  clients.emplace_back([&] { outs.back() = Generate(Request(late, 6)); });
  AwaitHeld(4);
  rank_back_ = true;
  for (auto& client : clients) client.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << i << ": " << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, Expected(prompts[i], 12)) << i;
  }
  ASSERT_TRUE(outs.back().status.ok()) << outs.back().status.error_message();
  EXPECT_EQ(outs.back().tokens, Expected(late, 6));
  EXPECT_TRUE(engine_->health().ok());
  EXPECT_FALSE(engine_->pause().has_value());
  const EngineStats stats = engine_->stats();
  EXPECT_EQ(stats.recovery.requests_held, 4);
  EXPECT_EQ(stats.recovery.requests_resumed, 4);
  EXPECT_EQ(stats.recovery.recoveries, 1);
  EXPECT_EQ(stats.num_held, 0);
  EXPECT_EQ(stats.blocks_used(), 0);
  EXPECT_EQ(stats.counters.num_preemptions, 0);  // held, not preempted
  ExpectConsistentSteps();
}

// Without a queue limit new requests are refused while requests are held; past the grace the
// held ones fail naming the rank, and the cluster serves once the group re-forms.
TEST_F(EngineTest, HeldRequestsFailPastTheGraceNamingTheRank) {
  StartWithRank2FailingAt(3, absl::Milliseconds(1500));
  Generated held;
  std::thread client([&] { held = Generate(Request({300, 301}, 10)); });
  AwaitHeld(1);
  const Generated refused = Generate(Request({302}, 2));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("held"));
  clock_.Advance(absl::Milliseconds(1500));  // the grace is over
  client.join();
  EXPECT_EQ(held.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(held.status.error_message(), HasSubstr("rank 2"));
  EXPECT_THAT(held.status.error_message(), HasSubstr("recovery grace"));
  EXPECT_FALSE(engine_->pause().has_value());
  EXPECT_EQ(engine_->stats().recovery.requests_resumed, 0);

  rank_back_ = true;
  ASSERT_TRUE(engine_->AwaitServing(absl::Now() + absl::Seconds(10)));
  const Generated served = Generate(Request({300, 301}, 4));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.tokens, Expected({300, 301}, 4));
  EXPECT_EQ(engine_->stats().blocks_used(), 0);
}

// A request that fails every step it runs in is held max_request_holds times, then fails naming
// the failures; the cluster serves the next request.
TEST_F(EngineTest, ARequestWhoseStepsAlwaysFailIsNotHeldForEver) {
  FakeWorkerOptions poisoned;
  poisoned.poison_token = 666;
  rank_back_ = true;
  ReformWhenTheRankIsBack();
  EngineOptions options;
  options.recovery_grace = absl::Seconds(60);
  options.max_request_holds = 2;
  Start({{}, {}, poisoned}, options);
  const absl::Time start = absl::Now();
  const Generated poison = Generate(Request({300, 666, 301}, 5));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(poison.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(poison.status.error_message(), HasSubstr("failed 3 times"));
  EXPECT_THAT(poison.status.error_message(), HasSubstr("rank 2"));
  EXPECT_THAT(poison.status.error_message(), HasSubstr("injected failure"));
  ASSERT_TRUE(engine_->AwaitServing(absl::Now() + absl::Seconds(10)));
  const Generated served = Generate(Request({300, 301}, 4));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.tokens, Expected({300, 301}, 4));
  const EngineStats stats = engine_->stats();
  EXPECT_EQ(stats.recovery.requests_held, 2);  // the third failure fails it
  EXPECT_EQ(stats.recovery.requests_resumed, 2);
  EXPECT_EQ(stats.recovery.recoveries, 3);
  EXPECT_EQ(stats.blocks_used(), 0);
}

// A re-formation attempt that succeeds only after the grace has run out: the requests held
// meanwhile fail as past the grace (they do not resume), the pause is reported until then, and a
// new request is served.
TEST_F(EngineTest, AReformationFinishingPastTheGraceFailsWhatItHeld) {
  absl::Notification attempt_started;
  absl::Notification attempt_may_end;
  reform_ = [&]() -> absl::Status {
    if (!attempt_started.HasBeenNotified()) attempt_started.Notify();
    attempt_may_end.WaitForNotification();
    WorkerInitOptions init;
    init.group_id = "test-reformed";
    init.block_size = block_size_;
    return pool_->Init(init, absl::Seconds(5));
  };
  FakeWorkerOptions failing;
  failing.fail_at_step = 3;
  EngineOptions options;
  options.recovery_grace = absl::Seconds(5);
  Start({{}, {}, failing}, options);
  Generated held;
  std::thread client([&] { held = Generate(Request({300, 301}, 10)); });
  ASSERT_TRUE(attempt_started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  clock_.Advance(absl::Seconds(6));  // past the grace, the attempt still running
  const std::optional<Engine::Pause> pause = engine_->pause();
  attempt_may_end.Notify();
  ASSERT_TRUE(pause.has_value());
  EXPECT_EQ(pause->grace_left, absl::ZeroDuration());
  client.join();
  EXPECT_EQ(held.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(held.status.error_message(), HasSubstr("rank 2"));
  EXPECT_THAT(held.status.error_message(), HasSubstr("recovery grace"));
  EXPECT_EQ(engine_->stats().recovery.requests_resumed, 0);
  EXPECT_TRUE(engine_->health().ok());
  EXPECT_FALSE(engine_->pause().has_value());
  const Generated served = Generate(Request({300, 301}, 4));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.tokens, Expected({300, 301}, 4));
}

// A client's deadline ends its call while the request is held, and the engine lets it go.
TEST_F(EngineTest, ClientDeadlineEndsAHeldRequest) {
  StartWithRank2FailingAt(3, absl::Seconds(60));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  auto reader = stub_->Generate(&context, Request({300, 301}, 10));
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  AwaitHeld(0);
  EXPECT_EQ(engine_->stats().num_waiting, 0);
  EXPECT_TRUE(engine_->pause().has_value());  // still paused, holding nothing
}

TEST_F(EngineTest, MissedStepDeadlineNamesTheRank) {
  FakeWorkerOptions hanging;
  hanging.hang_at_step = 2;
  EngineOptions options;
  options.step_timeout = absl::Milliseconds(500);
  Start({{}, hanging, {}}, options);
  const absl::Time start = absl::Now();
  Generated out = Generate(Request({300, 301}, 10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(out.status.error_message(), HasSubstr("rank 1"));
  EXPECT_THAT(out.status.error_message(), HasSubstr("no answer within 500ms"));
}

TEST_F(EngineTest, LoadShardChecksThatRanksAgree) {
  FakeWorkerOptions other;
  other.model_file_size = 999;
  StartWorkers({{}, other, {}});
  auto loaded = pool_->LoadShard(absl::Seconds(5));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(loaded.status().message(), HasSubstr("rank 1"));
  EXPECT_THAT(loaded.status().message(), HasSubstr("999 bytes"));
  EXPECT_THAT(loaded.status().message(), ::testing::Not(HasSubstr("rank 2")));
}

TEST_F(EngineTest, LoadShardErrorNamesTheRankAndCarriesTheMessage) {
  FakeWorkerOptions missing;
  missing.load_error = "cannot open /nonexistent/model.gguf";
  StartWorkers({{}, {}, missing});
  auto loaded = pool_->LoadShard(absl::Seconds(5));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(loaded.status().message(), HasSubstr("rank 2"));
  EXPECT_THAT(loaded.status().message(), HasSubstr("/nonexistent/model.gguf"));
}

TEST_F(EngineTest, KvCapacityIsTheMinimumOverRanks) {
  FakeWorkerOptions a, b;
  a.kv_cache_blocks = 40;
  b.kv_cache_blocks = 30;
  StartWorkers({a, b});
  auto loaded = pool_->LoadShard(absl::Seconds(5));
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->kv_cache_blocks, 30);
}

TEST_F(EngineTest, HeartbeatReportsAFailedRank) {
  FakeWorkerOptions failed;
  failed.state = "failed";
  StartWorkers({{}, failed});
  absl::Notification reported;
  std::string message;
  {
    HeartbeatMonitor monitor(pool_.get(), absl::Milliseconds(50), [&](const absl::Status& s) {
      if (!reported.HasBeenNotified()) {
        message = std::string(s.message());
        reported.Notify();
      }
    });
    ASSERT_TRUE(reported.WaitForNotificationWithTimeout(absl::Seconds(5)));
  }
  EXPECT_THAT(message, HasSubstr("rank 1"));
  EXPECT_THAT(message, HasSubstr("injected fault"));
}

TEST_F(EngineTest, HeartbeatReportsASilentRankWithinTwoIntervals) {
  constexpr absl::Duration kInterval = absl::Milliseconds(400);
  FakeWorkerOptions silent;
  silent.silent_after_heartbeats = 3;
  StartWorkers({{}, silent});
  absl::Notification reported;
  absl::Time reported_at;
  std::string message;
  {
    HeartbeatMonitor monitor(pool_.get(), kInterval, [&](const absl::Status& s) {
      if (reported.HasBeenNotified()) return;
      reported_at = absl::Now();
      message = std::string(s.message());
      reported.Notify();
    });
    ASSERT_TRUE(reported.WaitForNotificationWithTimeout(absl::Seconds(10)));
  }
  // Silent from its last answer on: the next round comes within an interval, and misses after
  // half of one.
  const absl::Duration silent_for = reported_at - fakes_[1]->last_status_answer();
  EXPECT_LT(silent_for, 2 * kInterval);
  EXPECT_GE(silent_for, HeartbeatMonitor::TimeoutFor(kInterval));
  EXPECT_THAT(message, HasSubstr("rank 1"));
  EXPECT_THAT(message, HasSubstr("no answer within"));
}

TEST_F(EngineTest, HeartbeatDoesNotReportASlowRankThatAnswers) {
  constexpr absl::Duration kInterval = absl::Milliseconds(200);
  FakeWorkerOptions slow;
  slow.status_delay = HeartbeatMonitor::TimeoutFor(kInterval) / 3;
  StartWorkers({{}, slow});
  std::atomic<int> failures{0};
  {
    HeartbeatMonitor monitor(pool_.get(), kInterval,
                             [&](const absl::Status&) { failures.fetch_add(1); });
    ASSERT_TRUE(fakes_[1]->AwaitStatusAnswers(10, absl::Now() + 30 * kInterval));
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(fakes_[1]->last_status_answer(), absl::Now() - 2 * kInterval);
}

// Two steps in flight (two pipeline stages): the engine sends a step before the one ahead of it
// has returned, each fake holds two Step calls at once (running them in step-id order), and every
// stream is exactly what one step at a time gives.
TEST_F(EngineTest, TwoStepsInFlightOverlapAndEveryStreamIsExact) {
  FakeWorkerOptions slow;
  slow.step_delay = absl::Milliseconds(20);
  EngineOptions options;
  options.steps_in_flight = 2;
  Start({slow, slow}, options);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back({300 + i, 310, 320 + i, 330, 340, 350 + i});
  std::vector<Generated> outs(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] { outs[i] = Generate(Request(prompts[i], 10)); });
  }
  for (auto& client : clients) client.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << i << ": " << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, Expected(prompts[i], 10)) << i;
  }
  for (const auto& fake : fakes_) EXPECT_EQ(fake->max_steps_at_once(), 2);
  EXPECT_EQ(engine_->stats().blocks_used(), 0);
  ExpectConsistentSteps();
}

// A step fails while the next one is in flight: the engine waits for that one too, holds every
// request of both, and they resume exactly when the group re-forms.
TEST_F(EngineTest, AFailedStepWithAnotherInFlightHoldsTheRequestsOfBoth) {
  EngineOptions options;
  options.steps_in_flight = 2;
  StartWithRank2FailingAt(6, absl::Seconds(60), options);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back({400 + i, 410, 420 + i, 430});
  std::vector<Generated> outs(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] { outs[i] = Generate(Request(prompts[i], 12)); });
  }
  AwaitHeld(4);
  EXPECT_EQ(engine_->stats().blocks_used(), 0);
  rank_back_ = true;
  for (auto& client : clients) client.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << i << ": " << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, Expected(prompts[i], 12)) << i;
  }
  const EngineStats stats = engine_->stats();
  EXPECT_EQ(stats.recovery.requests_held, 4);
  EXPECT_EQ(stats.recovery.recoveries, 1);
  EXPECT_EQ(stats.blocks_used(), 0);
  ExpectConsistentSteps();
}

}  // namespace
}  // namespace tpserve::testing
