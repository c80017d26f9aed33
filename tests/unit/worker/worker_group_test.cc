// Three WorkerServers in this process form a CPU group (shared memory, the automatic choice on one
// host) through CoordinatorStore on a minimal in-process ClusterService, and decode greedily in
// lockstep; rank 0's tokens must match a world-of-one loaded model. Then the group is re-formed
// under a new group id (a new segment) and serves again. Steps go to every rank, or, relayed, to
// rank 0 alone (step_relay.h): the others then refuse Step calls and run rank 0's steps.
#include <grpcpp/grpcpp.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kernels/cpu/sampling.h"
#include "worker/comm/single_rank_communicator.h"
#include "worker/forward_batch.h"
#include "worker/loaded_shard.h"
#include "worker/worker_server.h"

namespace tpserve {
namespace {

constexpr int kWorld = 3;
constexpr int64_t kBlockSize = 16;
constexpr int64_t kBlocks = 16;
const std::vector<int32_t> kPrompt = {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365};

// The rendezvous half of the coordinator's ClusterService.
class FakeClusterService final : public v1::ClusterService::Service {
 public:
  grpc::Status StoreSet(grpc::ServerContext*, const v1::StoreSetRequest* request,
                        v1::StoreSetResponse*) override {
    absl::MutexLock lock(&mu_);
    store_[request->key()] = request->value();
    return grpc::Status::OK;
  }
  grpc::Status StoreGet(grpc::ServerContext*, const v1::StoreGetRequest* request,
                        v1::StoreGetResponse* response) override {
    const std::string& key = request->key();
    auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return store_.contains(key); };
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&present),
                              absl::Milliseconds(request->timeout_ms()))) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "key '" + key + "' not set");
    }
    response->set_value(store_.at(key));
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> store_ ABSL_GUARDED_BY(mu_);
};

struct Rank {
  std::unique_ptr<WorkerServer> server;
  std::unique_ptr<v1::WorkerService::Stub> stub;
};

// Calls `method` on every rank at once (collectives need all of them) and returns the statuses.
template <typename Request, typename Response, typename Method>
std::vector<grpc::Status> CallAll(std::vector<Rank>& ranks, Method method,
                                  const std::vector<Request>& requests,
                                  std::vector<Response>* responses) {
  responses->assign(ranks.size(), Response());
  std::vector<std::future<grpc::Status>> calls;
  for (size_t r = 0; r < ranks.size(); ++r) {
    calls.push_back(std::async(std::launch::async, [&, r] {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      return (ranks[r].stub.get()->*method)(&context, requests[r], &(*responses)[r]);
    }));
  }
  std::vector<grpc::Status> statuses;
  for (auto& call : calls) statuses.push_back(call.get());
  return statuses;
}

void InitGroup(std::vector<Rank>& ranks, const std::string& coordinator,
               const std::string& group_id, bool relay) {
  std::vector<v1::InitRequest> requests(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    requests[r].set_rank(r);
    requests[r].set_world_size(kWorld);
    requests[r].set_device(v1::DEVICE_CPU);
    requests[r].set_group_id(group_id);
    requests[r].set_coordinator_address(coordinator);
    requests[r].set_kv_cache_blocks(kBlocks);
    requests[r].set_relay_steps(relay);
  }
  std::vector<v1::InitResponse> responses;
  for (const grpc::Status& s :
       CallAll(ranks, &v1::WorkerService::Stub::Init, requests, &responses)) {
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  std::vector<v1::LoadShardResponse> loads;
  for (const grpc::Status& s : CallAll(ranks, &v1::WorkerService::Stub::LoadShard,
                                       std::vector<v1::LoadShardRequest>(kWorld), &loads)) {
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(loads[0].model_fingerprint(), loads[2].model_fingerprint());
  EXPECT_EQ(loads[1].kv_cache_blocks(), kBlocks);
  for (const v1::LoadShardResponse& load : loads) EXPECT_EQ(load.relays_steps(), relay);
}

uint64_t LastStepId(Rank& rank) {
  grpc::ClientContext context;
  v1::WorkerStatusResponse status;
  EXPECT_TRUE(rank.stub->Status(&context, v1::WorkerStatusRequest(), &status).ok());
  return status.last_step_id();
}

// Prefill then greedy decode of `steps` tokens on every rank (`relay`: sent to rank 0 alone);
// returns rank 0's tokens.
std::vector<int32_t> Decode(std::vector<Rank>& ranks, int steps, bool relay) {
  std::vector<int32_t> tokens;
  std::vector<int32_t> run = kPrompt;
  int32_t position = 0;
  for (int step = 1; step <= steps; ++step) {
    v1::StepRequest request;
    request.set_step_id(step);
    if (step == 1) {
      v1::NewSequence* added = request.add_new_sequences();
      added->set_seq_id(3);
      added->mutable_prompt_token_ids()->Add(kPrompt.begin(), kPrompt.end());
      added->mutable_sampling()->set_top_p(1);  // greedy (temperature 0), no penalty
      added->mutable_sampling()->set_repetition_penalty(1);
    }
    v1::ScheduledSequence* s = request.add_sequences();
    s->set_seq_id(3);
    s->mutable_token_ids()->Add(run.begin(), run.end());
    s->set_start_position(position);
    if (step == 1) s->add_new_block_ids(2);
    if (position <= 16 && position + static_cast<int>(run.size()) > 16) s->add_new_block_ids(7);
    s->set_sample(true);
    std::vector<v1::StepResponse> responses(kWorld);
    if (relay) {
      grpc::ClientContext context;
      const grpc::Status status = ranks[0].stub->Step(&context, request, &responses[0]);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (!status.ok()) return tokens;
    } else {
      const auto statuses = CallAll(ranks, &v1::WorkerService::Stub::Step,
                                    std::vector<v1::StepRequest>(kWorld, request), &responses);
      for (const grpc::Status& status : statuses) {
        EXPECT_TRUE(status.ok()) << status.error_message();
        if (!status.ok()) return tokens;
      }
    }
    EXPECT_EQ(responses[1].outputs_size(), 0);
    EXPECT_EQ(responses[2].outputs_size(), 0);
    if (responses[0].outputs_size() != 1) return tokens;
    tokens.push_back(responses[0].outputs(0).token_ids(0));
    position += static_cast<int32_t>(run.size());
    run = {tokens.back()};
  }
  return tokens;
}

class WorkerGroup : public testing::TestWithParam<bool> {};  // relay_steps

TEST_P(WorkerGroup, ThreeCpuRanksDecodeLikeOneAndSurviveReforming) {
  const bool relay = GetParam();
  constexpr int kSteps = 8;
  std::vector<int32_t> expected;
  {
    SingleRankCommunicator comm;
    ModelRunnerOptions options;
    options.model_path = TPSERVE_MODEL_PATH;
    options.kv_cache_blocks = kBlocks;
    auto runner = LoadShard(options, &comm);
    ASSERT_TRUE(runner.ok()) << runner.status();
    std::vector<int32_t> run = kPrompt;
    int32_t position = 0;
    std::vector<float> logits;
    for (int i = 0; i < kSteps; ++i) {
      ForwardBatchBuilder builder(kBlockSize);
      builder.AddSequence(run, position, std::vector<int32_t>{2, 7}, false);
      ASSERT_TRUE((*runner)->forward_pass().Forward(builder.Build(), &logits).ok());
      expected.push_back(cpu::Argmax(logits.data(), static_cast<int64_t>(logits.size())));
      position += static_cast<int32_t>(run.size());
      run = {expected.back()};
    }
  }

  FakeClusterService cluster;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&cluster);
  std::unique_ptr<grpc::Server> coordinator = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  const std::string coordinator_address = "127.0.0.1:" + std::to_string(port);

  std::vector<Rank> ranks(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    WorkerServerOptions options;
    options.rank = r;
    options.model_path = TPSERVE_MODEL_PATH;
    auto server = WorkerServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    ranks[r].server = *std::move(server);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxMessageBytes);
    ranks[r].stub = v1::WorkerService::NewStub(grpc::CreateCustomChannel(
        ranks[r].server->address(), grpc::InsecureChannelCredentials(), args));
  }

  InitGroup(ranks, coordinator_address, "group-1", relay);
  EXPECT_EQ(Decode(ranks, kSteps, relay), expected);
  if (relay) {
    // Every rank ran every step (rank 0's step returns once the others have all-reduced with it;
    // their Status catches up when each finishes the step's last collective).
    for (int r = 1; r < kWorld; ++r) {
      const absl::Time deadline = absl::Now() + absl::Seconds(10);
      while (LastStepId(ranks[r]) != kSteps && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(10));
      }
      EXPECT_EQ(LastStepId(ranks[r]), kSteps) << "rank " << r;
    }
    grpc::ClientContext context;
    v1::StepResponse response;
    v1::StepRequest request;
    request.set_step_id(kSteps + 1);
    const grpc::Status refused = ranks[1].stub->Step(&context, request, &response);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(refused.error_message().find("from rank 0"), std::string::npos)
        << refused.error_message();
  }
  // Re-form under a new id, the followers waiting for rank 0: the shards stay, sequences and step
  // ids start over.
  InitGroup(ranks, coordinator_address, "group-2", relay);
  EXPECT_EQ(Decode(ranks, kSteps, relay), expected);
  // Stop ends the followers' wait for a step that never comes.
  for (Rank& rank : ranks) rank.server->Stop();
  coordinator->Shutdown();
}

INSTANTIATE_TEST_SUITE_P(StepsTo, WorkerGroup, testing::Bool(), [](const auto& info) {
  return info.param ? "RankZeroWhichRelaysThem" : "EveryRank";
});

}  // namespace
}  // namespace tpserve
