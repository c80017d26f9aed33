// WorkerServer in this process on 127.0.0.1, world size 1, driven through a real gRPC channel
// with the bundled model; results are checked against the loaded model run directly.
#include "worker/worker_server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "worker/comm/single_rank_communicator.h"
#include "worker/forward_batch.h"
#include "worker/model_runner.h"

namespace tpserve {
namespace {

constexpr int64_t kBlockSize = 16;
constexpr int64_t kBlocks = 64;
const std::vector<int32_t> kPrompt = {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 30, 2};

std::unique_ptr<v1::WorkerService::Stub> Connect(const WorkerServer& server) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  return v1::WorkerService::NewStub(
      grpc::CreateCustomChannel(server.address(), grpc::InsecureChannelCredentials(), args));
}

v1::InitRequest InitRequest() {
  v1::InitRequest init;
  init.set_rank(0);
  init.set_world_size(1);
  init.set_device(v1::DEVICE_CPU);
  init.set_block_size(kBlockSize);
  init.set_kv_cache_blocks(kBlocks);
  return init;
}

class WorkerServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    WorkerServerOptions options;
    options.model_path = TPSERVE_MODEL_PATH;
    auto server = WorkerServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    comm_ = new SingleRankCommunicator();
    ModelRunnerOptions runner_options;
    runner_options.model_path = TPSERVE_MODEL_PATH;
    runner_options.block_size = kBlockSize;
    runner_options.kv_cache_blocks = kBlocks;
    auto runner = LoadShard(runner_options, comm_);
    ASSERT_TRUE(runner.ok()) << runner.status();
    reference_ = runner->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete reference_;
    delete comm_;
  }

  // Every test starts a fresh group: Init resets step ids and sequences, keeps the shard.
  void SetUp() override {
    stub_ = Connect(*server_);
    v1::InitResponse init_response;
    ASSERT_TRUE(Call(&v1::WorkerService::Stub::Init, InitRequest(), &init_response).ok());
    v1::LoadShardResponse load;
    const grpc::Status status =
        Call(&v1::WorkerService::Stub::LoadShard, v1::LoadShardRequest(), &load);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(load.kv_cache_blocks(), kBlocks);
    vocab_ = load.vocab_size();
    ASSERT_EQ(vocab_, reference_->config().vocab_size);
  }

  template <typename Method, typename Request, typename Response>
  grpc::Status Call(Method method, const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return (stub_.get()->*method)(&context, request, response);
  }

  // A step refused for one sequence's data answers OK with `refused` naming it; here it reads as
  // the status "[seq N] <message>", so that refusals and other failures are checked alike.
  grpc::Status Step(const v1::StepRequest& request, v1::StepResponse* response) {
    const grpc::Status status = Call(&v1::WorkerService::Stub::Step, request, response);
    if (!status.ok() || !response->has_refused()) return status;
    EXPECT_EQ(response->outputs_size(), 0);
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("[seq ", response->refused().seq_id(), "] ",
                                     response->refused().message()));
  }

  // The next step of this test: step ids count from 1 after each Init.
  v1::StepRequest NextStep() {
    v1::StepRequest request;
    request.set_step_id(++step_id_);
    return request;
  }

  // Logits of the reference runner for one sequence.
  std::vector<float> Reference(const std::vector<int32_t>& tokens, int32_t start,
                               const std::vector<int32_t>& table, bool all_logits) {
    ForwardBatchBuilder builder(kBlockSize);
    builder.AddSequence(tokens, start, table, all_logits);
    std::vector<float> logits;
    EXPECT_TRUE(reference_->forward_pass().Forward(builder.Build(), &logits).ok());
    return logits;
  }

  static WorkerServer* server_;
  static SingleRankCommunicator* comm_;
  static LoadedShard* reference_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  int64_t vocab_ = 0;
  uint64_t step_id_ = 0;
};

WorkerServer* WorkerServerTest::server_ = nullptr;
SingleRankCommunicator* WorkerServerTest::comm_ = nullptr;
LoadedShard* WorkerServerTest::reference_ = nullptr;

v1::ScheduledSequence* Schedule(v1::StepRequest* request, uint64_t seq_id,
                                const std::vector<int32_t>& tokens, int32_t start,
                                const std::vector<int32_t>& new_blocks, bool sample) {
  v1::ScheduledSequence* s = request->add_sequences();
  s->set_seq_id(seq_id);
  s->mutable_token_ids()->Add(tokens.begin(), tokens.end());
  s->set_start_position(start);
  s->mutable_new_block_ids()->Add(new_blocks.begin(), new_blocks.end());
  s->set_sample(sample);
  return s;
}

void AddNew(v1::StepRequest* request, uint64_t seq_id, const std::vector<int32_t>& prompt) {
  v1::NewSequence* s = request->add_new_sequences();
  s->set_seq_id(seq_id);
  s->mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
  // Greedy; the worker takes every field as it is, so the neutral values are spelled out.
  s->mutable_sampling()->set_top_p(1);
  s->mutable_sampling()->set_repetition_penalty(1);
}

TEST(WorkerServerLifecycle, StepBeforeLoadShardIsFailedPrecondition) {
  WorkerServerOptions options;
  options.model_path = "/nonexistent/model.gguf";
  auto server = WorkerServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Connect(**server);
  {
    grpc::ClientContext context;
    v1::StepRequest step;
    step.set_step_id(1);
    v1::StepResponse response;
    EXPECT_EQ(stub->Step(&context, step, &response).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    grpc::ClientContext context;
    v1::InitResponse response;
    ASSERT_TRUE(stub->Init(&context, InitRequest(), &response).ok());
  }
  grpc::ClientContext context;
  v1::LoadShardResponse response;
  const grpc::Status status = stub->LoadShard(&context, {}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find("/nonexistent/model.gguf"), std::string::npos)
      << status.error_message();
  // Shutdown answers, then the owner's WaitForShutdownRequest returns and it stops the server.
  grpc::ClientContext shutdown_context;
  v1::ShutdownResponse shutdown;
  EXPECT_TRUE(stub->Shutdown(&shutdown_context, {}, &shutdown).ok());
  (*server)->WaitForShutdownRequest();
  (*server)->Stop();
}

// Even with the cluster's credentials, Init may not point the worker at another file: it is
// refused unopened, and the answer holds nothing of the file.
TEST(WorkerServerLifecycle, InitRefusesAModelItWasNotStartedWith) {
  WorkerServerOptions options;
  options.model_path = TPSERVE_MODEL_PATH;
  auto server = WorkerServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Connect(**server);
  for (const char* path : {"/etc/passwd", "/proc/self/environ", "../../etc/passwd"}) {
    grpc::ClientContext context;
    v1::InitRequest init = InitRequest();
    init.set_model_path(path);
    v1::InitResponse response;
    const grpc::Status status = stub->Init(&context, init, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << path;
    EXPECT_EQ(status.error_message().find("root"), std::string::npos) << status.error_message();
  }
  // Nor at a LoRA adapter it was not started with (--lora-path).
  for (const char* path : {"/etc", "/tmp"}) {
    grpc::ClientContext context;
    v1::InitRequest init = InitRequest();
    v1::InitRequest::LoraAdapter* adapter = init.add_lora_adapters();
    adapter->set_slot(1);
    adapter->set_path(path);
    init.set_max_loras(1);
    v1::InitResponse response;
    const grpc::Status status = stub->Init(&context, init, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << path;
    EXPECT_NE(status.error_message().find("--lora-path"), std::string::npos)
        << status.error_message();
    EXPECT_EQ(status.error_message().find(path), std::string::npos) << status.error_message();
  }
  grpc::ClientContext status_context;
  v1::WorkerStatusResponse worker_status;
  ASSERT_TRUE(stub->Status(&status_context, {}, &worker_status).ok());
  EXPECT_EQ(worker_status.state(), "starting");
  EXPECT_TRUE(worker_status.error().empty()) << worker_status.error();
  grpc::ClientContext init_context;
  v1::InitResponse init_response;
  EXPECT_TRUE(stub->Init(&init_context, InitRequest(), &init_response).ok());
  (*server)->Stop();
}

// With steps in flight (pipeline stages) the calls of steps k and k+1 may arrive in either order:
// a step waits for the one before it, a repeated one is refused, and a step whose predecessor
// never comes ends at its deadline without blocking the rank.
TEST_F(WorkerServerTest, StepsRunInStepIdOrder) {
  v1::StepResponse early_response;
  v1::StepRequest early;
  early.set_step_id(2);
  grpc::Status early_status;
  absl::Notification early_done;
  std::thread early_call([&] {
    early_status = Step(early, &early_response);
    early_done.Notify();
  });
  EXPECT_FALSE(early_done.WaitForNotificationWithTimeout(absl::Milliseconds(300)))
      << "step 2 ran before step 1: " << early_status.error_message();
  v1::StepResponse response;
  ASSERT_TRUE(Step(NextStep(), &response).ok());
  EXPECT_EQ(response.step_id(), 1u);
  early_call.join();
  ASSERT_TRUE(early_status.ok()) << early_status.error_message();
  EXPECT_EQ(early_response.step_id(), 2u);
  ++step_id_;

  v1::StepRequest repeat;
  repeat.set_step_id(1);
  grpc::Status status = Step(repeat, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find("step_id 1"), std::string::npos) << status.error_message();
  EXPECT_NE(status.error_message().find("must be 3"), std::string::npos) << status.error_message();

  v1::StepRequest gap;
  gap.set_step_id(5);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  status = stub_->Step(&context, gap, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  ASSERT_TRUE(Step(NextStep(), &response).ok());
  EXPECT_EQ(response.step_id(), 3u);
}

TEST_F(WorkerServerTest, ChunkedPrefillThenGreedyDecodeMatchesTheModel) {
  // Blocks 5 and 9: positions 0-15 and 16-31. Prefill in two chunks, then decode one token a step.
  const std::vector<int32_t> table = {5, 9};
  const std::vector<int32_t> chunk1(kPrompt.begin(), kPrompt.begin() + 7);
  const std::vector<int32_t> chunk2(kPrompt.begin() + 7, kPrompt.end());
  std::vector<int32_t> expected;
  Reference(chunk1, 0, table, false);
  std::vector<float> logits = Reference(chunk2, 7, table, false);
  int32_t position = static_cast<int32_t>(kPrompt.size());
  for (int i = 0; i < 8; ++i) {
    expected.push_back(
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    logits = Reference({expected.back()}, position++, table, false);
  }

  v1::StepResponse response;
  v1::StepRequest step = NextStep();
  AddNew(&step, 42, kPrompt);
  Schedule(&step, 42, chunk1, 0, {5}, /*sample=*/false);
  ASSERT_TRUE(Step(step, &response).ok());
  EXPECT_EQ(response.outputs_size(), 0);
  step = NextStep();
  Schedule(&step, 42, chunk2, 7, {}, /*sample=*/true);
  std::vector<int32_t> actual;
  position = static_cast<int32_t>(kPrompt.size());
  for (int i = 0; i < 8; ++i) {
    const grpc::Status status = Step(step, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.outputs_size(), 1);
    EXPECT_EQ(response.outputs(0).seq_id(), 42u);
    EXPECT_EQ(response.outputs(0).logits_size(), 0);
    actual.push_back(response.outputs(0).token_ids(0));
    step = NextStep();
    Schedule(&step, 42, {actual.back()}, position,
             position == 16 ? std::vector<int32_t>{9} : std::vector<int32_t>{},
             /*sample=*/true);
    ++position;
  }
  EXPECT_EQ(actual, expected);

  v1::WorkerStatusResponse status;
  ASSERT_TRUE(Call(&v1::WorkerService::Stub::Status, v1::WorkerStatusRequest(), &status).ok());
  EXPECT_EQ(status.state(), "serving");
  EXPECT_EQ(status.last_step_id(), step_id_ - 1);
  EXPECT_EQ(status.kv_cache_blocks(), kBlocks);
  EXPECT_GT(status.weight_bytes(), 0);
  EXPECT_GT(status.step_latency_p50_ms(), 0);
}

TEST_F(WorkerServerTest, AllLogitsReturnsEveryRowOfTheRightSize) {
  const std::vector<int32_t> tokens(kPrompt.begin(), kPrompt.begin() + 5);
  v1::StepRequest step = NextStep();
  AddNew(&step, 7, tokens);
  Schedule(&step, 7, tokens, 0, {3}, /*sample=*/false)->set_all_logits(true);
  v1::StepResponse response;
  const grpc::Status status = Step(step, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).token_ids_size(), 0);
  ASSERT_EQ(response.outputs(0).logits_size(), 5 * vocab_);
  const std::vector<float> expected = Reference(tokens, 0, {3}, /*all_logits=*/true);
  ASSERT_EQ(static_cast<int64_t>(expected.size()), 5 * vocab_);
  float max_diff = 0;
  for (int64_t i = 0; i < 5 * vocab_; ++i) {
    max_diff = std::max(max_diff, std::abs(expected[i] - response.outputs(0).logits(i)));
  }
  EXPECT_LT(max_diff, 1e-4f);
}

// The log-probabilities are the log-softmax of the reference runner's raw logits, computed here
// independently in double precision.
TEST_F(WorkerServerTest, LogprobsAreTheLogSoftmaxOfTheRawLogits) {
  const std::vector<int32_t> tokens(kPrompt.begin(), kPrompt.begin() + 6);
  v1::StepRequest step = NextStep();
  AddNew(&step, 9, tokens);
  step.mutable_new_sequences(0)->set_return_logprobs(true);
  step.mutable_new_sequences(0)->set_top_logprobs(3);
  Schedule(&step, 9, tokens, 0, {4}, /*sample=*/true);
  v1::StepResponse response;
  const grpc::Status status = Step(step, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  const v1::SequenceOutput& out = response.outputs(0);
  const std::vector<float> logits = Reference(tokens, 0, {4}, /*all_logits=*/false);
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x));
  auto logprob = [&](int32_t id) { return logits[id] - std::log(sum); };
  ASSERT_EQ(out.token_ids_size(), 1);
  ASSERT_EQ(out.logprobs_size(), 1);
  EXPECT_NEAR(out.logprobs(0), logprob(out.token_ids(0)), 1e-4);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  ASSERT_EQ(out.top_token_ids_size(), 3);
  ASSERT_EQ(out.top_logprobs_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out.top_token_ids(i), order[i]);
    EXPECT_NEAR(out.top_logprobs(i), logprob(order[i]), 1e-4);
  }
  EXPECT_EQ(out.token_ids(0), order[0]);  // greedy: the sampled token is the most likely
}

// Drafts through the protocol: the model's own greedy continuation (from the reference model) is
// accepted up to the first wrong draft, whose correction comes back; the next step starts after
// the accepted drafts, the rejected position is computed again, and decoding goes on exactly.
TEST_F(WorkerServerTest, GreedyDraftsAreVerifiedAndTheSequenceGoesOnAfterTheAcceptedOnes) {
  const std::vector<int32_t> table = {11};
  std::vector<int32_t> greedy;  // the reference's next four tokens after kPrompt
  std::vector<float> logits = Reference(kPrompt, 0, table, false);
  int32_t position = static_cast<int32_t>(kPrompt.size());
  for (int i = 0; i < 4; ++i) {
    greedy.push_back(
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    logits = Reference({greedy.back()}, position++, table, false);
  }
  const int32_t wrong = (greedy[2] + 1) % static_cast<int32_t>(vocab_);
  v1::StepRequest step = NextStep();
  AddNew(&step, 5, kPrompt);
  v1::ScheduledSequence* s = Schedule(&step, 5, kPrompt, 0, {11}, /*sample=*/true);
  for (int32_t draft : {greedy[0], greedy[1], wrong}) s->add_draft_token_ids(draft);
  v1::StepResponse response;
  grpc::Status status = Step(step, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  const std::vector<int32_t> first(response.outputs(0).token_ids().begin(),
                                   response.outputs(0).token_ids().end());
  EXPECT_EQ(first, (std::vector<int32_t>{greedy[0], greedy[1], greedy[2]}));

  const int32_t after = static_cast<int32_t>(kPrompt.size()) + 2;  // two drafts accepted
  step = NextStep();
  Schedule(&step, 5, {greedy[2]}, after + 2, {}, /*sample=*/true);  // past the drafts run
  status = Step(step, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("is outside [12, 15]"), std::string::npos)
      << status.error_message();
  step = NextStep();
  Schedule(&step, 5, {greedy[2]}, after, {}, /*sample=*/true);
  status = Step(step, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs(0).token_ids_size(), 1);
  EXPECT_EQ(response.outputs(0).token_ids(0), greedy[3]);
}

// A token bitmask through the protocol: one allowed token is what a hot sampler picks, and a mask
// of the wrong length is refused naming the field, with the worker still serving.
TEST_F(WorkerServerTest, TokenBitmaskForcesTheAllowedTokenAndABadOneIsRefused) {
  constexpr int32_t kAllowed = 4242;
  const int64_t words = (vocab_ + 31) / 32;
  v1::StepRequest step = NextStep();
  AddNew(&step, 6, kPrompt);
  step.mutable_new_sequences(0)->mutable_sampling()->set_temperature(2.0f);
  step.mutable_new_sequences(0)->mutable_sampling()->set_seed(77);
  v1::ScheduledSequence* s = Schedule(&step, 6, kPrompt, 0, {12}, /*sample=*/true);
  for (int64_t w = 0; w < words; ++w) {
    s->add_token_bitmask(w == kAllowed / 32 ? 1u << (kAllowed % 32) : 0u);
  }
  v1::StepResponse response;
  grpc::Status status = Step(step, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs(0).token_ids_size(), 1);
  EXPECT_EQ(response.outputs(0).token_ids(0), kAllowed);

  step = NextStep();
  s = Schedule(&step, 6, {kAllowed}, static_cast<int32_t>(kPrompt.size()), {}, /*sample=*/true);
  s->add_token_bitmask(~0u);
  status = Step(step, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("sequence 6: token_bitmask has 1 words"), std::string::npos)
      << status.error_message();
  step = NextStep();
  Schedule(&step, 6, {kAllowed}, static_cast<int32_t>(kPrompt.size()), {}, /*sample=*/true);
  status = Step(step, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(WorkerServerTest, BadRequestsAreInvalidArgumentAndTheServerKeepsServing) {
  struct Case {
    const char* name;
    std::function<void(v1::StepRequest*)> build;
    uint64_t seq;         // the sequence the refusal names
    const char* message;  // expected in the error
  };
  const std::vector<int32_t> prompt(kPrompt.begin(), kPrompt.begin() + 4);
  const std::vector<Case> cases = {
      {"unknown seq id", [&](v1::StepRequest* r) { Schedule(r, 999, prompt, 0, {0}, true); },
       999, "sequence 999 is unknown"},
      {"block id outside the pool",
       [&](v1::StepRequest* r) {
         AddNew(r, 1, prompt);
         Schedule(r, 1, prompt, 0, {kBlocks}, true);
       },
       1, "outside the KV pool"},
      {"missing blocks",
       [&](v1::StepRequest* r) {
         AddNew(r, 1, prompt);
         Schedule(r, 1, prompt, 0, {}, true);
       },
       1, "missing new_block_ids"},
      {"token outside the vocabulary",
       [&](v1::StepRequest* r) {
         AddNew(r, 1, prompt);
         Schedule(r, 1, {1, 1 << 30}, 0, {0}, true);
       },
       1, "outside the vocabulary"},
      {"negative temperature",
       [&](v1::StepRequest* r) {
         AddNew(r, 1, prompt);
         r->mutable_new_sequences(0)->mutable_sampling()->set_temperature(-1);
       },
       1, "temperature"},
      {"duplicate new sequence",
       [&](v1::StepRequest* r) {
         AddNew(r, 1, prompt);
         AddNew(r, 1, prompt);
       },
       1, "already exists"},
  };
  for (const Case& c : cases) {
    v1::StepRequest step = NextStep();
    c.build(&step);
    v1::StepResponse response;
    const grpc::Status status = Step(step, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.name;
    EXPECT_TRUE(absl::StartsWith(status.error_message(), absl::StrCat("[seq ", c.seq, "] ")))
        << c.name << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(c.message), std::string::npos)
        << c.name << ": " << status.error_message();
  }
  // Rejected steps added nothing: sequence 1 is new again, and it runs.
  v1::StepRequest step = NextStep();
  AddNew(&step, 1, prompt);
  Schedule(&step, 1, prompt, 0, {0}, true);
  v1::StepResponse response;
  grpc::Status status = Step(step, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  // A start position that does not follow the computed ones.
  step = NextStep();
  Schedule(&step, 1, {response.outputs(0).token_ids(0)}, 2, {}, true);
  status = Step(step, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("4 positions are computed"), std::string::npos)
      << status.error_message();
  // Finished sequences are gone at the start of the step.
  step = NextStep();
  step.add_finished_seq_ids(1);
  Schedule(&step, 1, {5}, 4, {}, true);
  status = Step(step, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("[seq 1] sequence 1 is unknown"), std::string::npos);
}

// Last: it reloads the shard with a pool sized from a byte budget.
// A CUDA group on a machine without a device (a build without CUDA: UNIMPLEMENTED) is refused
// at Init with the reason, and the worker still takes a CPU group afterwards.
TEST_F(WorkerServerTest, CudaInitWithoutADeviceIsRefusedAndCpuStillServes) {
  v1::InitRequest cuda = InitRequest();
  cuda.set_device(v1::DEVICE_CUDA);
  v1::InitResponse response;
  const grpc::Status refused = Call(&v1::WorkerService::Stub::Init, cuda, &response);
  if (refused.ok()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_TRUE(refused.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
              refused.error_code() == grpc::StatusCode::UNIMPLEMENTED)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("CUDA"), std::string::npos) << refused.error_message();

  ASSERT_TRUE(Call(&v1::WorkerService::Stub::Init, InitRequest(), &response).ok());
  EXPECT_EQ(response.device_name(), "cpu");
  v1::LoadShardResponse load;
  ASSERT_TRUE(Call(&v1::WorkerService::Stub::LoadShard, v1::LoadShardRequest(), &load).ok());
  step_id_ = 0;
  v1::StepRequest request = NextStep();
  AddNew(&request, 1, {1, 2, 3});
  Schedule(&request, 1, {1, 2, 3}, 0, {0}, /*sample=*/true);
  v1::StepResponse step;
  const grpc::Status status = Step(request, &step);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(step.outputs_size(), 1);
}

TEST_F(WorkerServerTest, SelfSpeculationLayersAreChecked) {
  v1::InitResponse response;
  v1::InitRequest negative = InitRequest();
  negative.set_self_spec_layers(-1);
  grpc::Status status = Call(&v1::WorkerService::Stub::Init, negative, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("self_spec_layers (-1)"), std::string::npos)
      << status.error_message();
  v1::InitRequest both = InitRequest();
  both.set_self_spec_layers(1);
  both.set_draft_model_path("draft.gguf");
  status = Call(&v1::WorkerService::Stub::Init, both, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // More layers than the model has: refused when the shard loads, naming both counts.
  v1::InitRequest too_many = InitRequest();
  too_many.set_self_spec_layers(1000);
  ASSERT_TRUE(Call(&v1::WorkerService::Stub::Init, too_many, &response).ok());
  v1::LoadShardResponse load;
  status = Call(&v1::WorkerService::Stub::LoadShard, v1::LoadShardRequest(), &load);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.error_message().find("first 1000 layers of a model of"), std::string::npos)
      << status.error_message();
}

TEST_F(WorkerServerTest, KvPoolIsSizedFromTheByteBudgetWhenNoBlockCountIsGiven) {
  const KvCacheShape& shape = reference_->kv_shape();
  v1::InitRequest init = InitRequest();
  init.set_kv_cache_blocks(0);
  init.set_kv_cache_bytes(10 * shape.bytes_per_block() + 1);
  v1::InitResponse init_response;
  ASSERT_TRUE(Call(&v1::WorkerService::Stub::Init, init, &init_response).ok());
  v1::LoadShardResponse load;
  ASSERT_TRUE(Call(&v1::WorkerService::Stub::LoadShard, v1::LoadShardRequest(), &load).ok());
  EXPECT_EQ(load.kv_cache_blocks(), 10);
  EXPECT_EQ(load.context_length(), reference_->config().context_length);
  EXPECT_EQ(load.model_file_size(), reference_->file().file_size());
  EXPECT_EQ(load.model_fingerprint().size(), 16u);
}

}  // namespace
}  // namespace tpserve
