// The engine's request path: generation, stops, preemption, prefix sharing, n samples, queue
// limits, drains, scoring, bad requests, shard loading and heartbeats.
#include "coordinator/engine.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/coordinator/engine_fixture.h"

namespace tpserve::testing {
namespace {

using ::testing::HasSubstr;

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

}  // namespace
}  // namespace tpserve::testing
