// One table of out-of-range sampling parameters sent through every edge that takes them: the
// OpenAI HTTP API and the public gRPC API of a real T=1 cluster (coordinator and worker
// processes), and a WorkerServer's Step over a real gRPC channel. Each edge must refuse each
// value with INVALID_ARGUMENT (HTTP 400) and the same message naming the field, and keep serving.
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster_test_util.h"
#include "tpserve/v1/inference.grpc.pb.h"
#include "tpserve/v1/worker.grpc.pb.h"
#include "worker/worker_server.h"

namespace tpserve {
namespace {

using nlohmann::json;

struct Case {
  const char* field;
  double value;
  const char* message;  // the one message every edge must give
};

// Values exact in binary, so that every edge prints them alike.
const Case kCases[] = {
    {"temperature", -1, "temperature = -1 must be a finite number >= 0"},
    {"top_k", -5, "top_k = -5 must be >= 0 (0 disables it)"},
    {"top_p", 0, "top_p = 0 is outside (0, 1]"},
    {"top_p", 1.5, "top_p = 1.5 is outside (0, 1]"},
    {"min_p", 2, "min_p = 2 is outside [0, 1]"},
    {"min_p", -0.5, "min_p = -0.5 is outside [0, 1]"},
    {"repetition_penalty", 0, "repetition_penalty = 0 is outside [0.01, 100]"},
    {"repetition_penalty", 128, "repetition_penalty = 128 is outside [0.01, 100]"},
    {"presence_penalty", 3, "presence_penalty = 3 is outside [-2, 2]"},
    {"frequency_penalty", -2.5, "frequency_penalty = -2.5 is outside [-2, 2]"},
};

// Sets `field` of a public or worker sampling message (their field names are the same).
template <typename Sampling>
void Set(Sampling* s, const std::string& field, double v) {
  const std::map<std::string, std::function<void()>> setters = {
      {"temperature", [&] { s->set_temperature(v); }},
      {"top_k", [&] { s->set_top_k(static_cast<int32_t>(v)); }},
      {"top_p", [&] { s->set_top_p(v); }},
      {"min_p", [&] { s->set_min_p(v); }},
      {"repetition_penalty", [&] { s->set_repetition_penalty(v); }},
      {"presence_penalty", [&] { s->set_presence_penalty(v); }},
      {"frequency_penalty", [&] { s->set_frequency_penalty(v); }},
  };
  setters.at(field)();
}

class SamplingLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    options_ = new LocalClusterOptions(testing::ClusterOptions(TPSERVE_MODEL_PATH, 1));
    options_->http_port = 0;
    auto cluster = testing::StartServing(*options_, absl::Seconds(180));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
    WorkerServerOptions worker;
    worker.model_path = TPSERVE_MODEL_PATH;
    auto server = WorkerServer::Start(worker);
    ASSERT_TRUE(server.ok()) << server.status();
    worker_ = server->release();
  }
  static void TearDownTestSuite() {
    delete worker_;
    delete cluster_;
    delete options_;
  }

  // The error message of /v1/completions with `field` = `value`; "" when it was accepted.
  std::string Http(const Case& c, std::string* param) {
    httplib::Client client("http://" + cluster_->http_address());
    client.set_read_timeout(60);
    json body = {{"prompt", "Hi"}, {"max_tokens", 1}, {c.field, c.value}};
    const auto result = client.Post("/v1/completions", body.dump(), "application/json");
    if (!result) return "no HTTP answer";
    if (result->status == 200) return "";
    EXPECT_EQ(result->status, 400) << c.field << " = " << c.value;
    const json error = json::parse(result->body).at("error");
    *param = error.value("param", "");
    return error.at("message").get<std::string>();
  }

  std::string Grpc(const Case& c) {
    v1::GenerateRequest request;
    request.set_text("Hi");
    request.set_max_tokens(1);
    Set(request.mutable_sampling(), c.field, c.value);
    grpc::ClientContext context;
    auto reader = cluster_->inference().Generate(&context, request);
    v1::GenerateResponse chunk;
    while (reader->Read(&chunk)) {
    }
    const grpc::Status status = reader->Finish();
    if (status.ok()) return "";
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    return status.error_message();
  }

  // A fresh group on the WorkerServer, then one step with a new sequence sampling with `c`.
  std::string Worker(const Case& c) {
    auto stub = v1::WorkerService::NewStub(
        grpc::CreateChannel(worker_->address(), grpc::InsecureChannelCredentials()));
    auto call = [&](auto method, const auto& request, auto* response) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      return (stub.get()->*method)(&context, request, response);
    };
    v1::InitRequest init;
    init.set_world_size(1);
    init.set_kv_cache_blocks(8);
    v1::InitResponse init_response;
    EXPECT_TRUE(call(&v1::WorkerService::Stub::Init, init, &init_response).ok());
    v1::LoadShardResponse loaded;
    EXPECT_TRUE(call(&v1::WorkerService::Stub::LoadShard, v1::LoadShardRequest(), &loaded).ok());
    v1::StepRequest step;
    step.set_step_id(1);
    v1::NewSequence* added = step.add_new_sequences();
    added->set_seq_id(1);
    added->add_prompt_token_ids(1);
    v1::SamplingParams* sampling = added->mutable_sampling();
    sampling->set_temperature(1);  // SamplingParams' defaults, then the bad value
    sampling->set_top_p(1);
    sampling->set_repetition_penalty(1);
    Set(sampling, c.field, c.value);
    v1::ScheduledSequence* scheduled = step.add_sequences();
    scheduled->set_seq_id(1);
    scheduled->add_token_ids(1);
    scheduled->add_new_block_ids(0);
    scheduled->set_sample(true);
    v1::StepResponse response;
    const grpc::Status status = call(&v1::WorkerService::Stub::Step, step, &response);
    // A value the worker refuses refuses the step for that sequence alone.
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!response.has_refused()) return "";
    EXPECT_EQ(response.refused().seq_id(), 1u);
    return response.refused().message();
  }

  static LocalClusterOptions* options_;
  static LocalCluster* cluster_;
  static WorkerServer* worker_;
};

LocalClusterOptions* SamplingLimitsTest::options_ = nullptr;
LocalCluster* SamplingLimitsTest::cluster_ = nullptr;
WorkerServer* SamplingLimitsTest::worker_ = nullptr;

TEST_F(SamplingLimitsTest, EveryEdgeRefusesTheSameValuesWithTheSameMessage) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.message);
    std::string param;
    EXPECT_EQ(Http(c, &param), c.message);
    EXPECT_EQ(param, c.field);
    EXPECT_EQ(Grpc(c), c.message);
    EXPECT_EQ(Worker(c), std::string("new sequence 1: ") + c.message);
  }
  // Still serving, and the valid extremes of each range are accepted.
  for (const Case& c : {Case{"temperature", 0, ""}, Case{"top_p", 1, ""},
                        Case{"repetition_penalty", 100, ""}, Case{"frequency_penalty", -2, ""}}) {
    std::string param;
    EXPECT_EQ(Http(c, &param), "") << c.field;
    EXPECT_EQ(Grpc(c), "") << c.field;
    EXPECT_EQ(Worker(c), "") << c.field;
  }
}

}  // namespace
}  // namespace tpserve
