// The trust boundary, tried as an attacker on 127.0.0.1 would: real coordinator and worker
// processes (LocalCluster gives them a random cluster token in a 0600 file), calls without and
// with a wrong credential. Each must be refused (UNAUTHENTICATED / 401) and change nothing: the
// cluster then serves exactly as before. With the right credential the same calls work.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster_test_util.h"
#include "tpserve/v1/admin.grpc.pb.h"
#include "tpserve/v1/inference.grpc.pb.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve::testing {
namespace {

constexpr char kApiKey[] = "sk-test-0123456789";
const std::vector<int32_t> kPrompt = {1, 504, 3458, 282, 5248, 314, 253, 1345};

// Calls `method` ("/pkg.Service/Method") on `address` with an empty request (every request
// message parses from no bytes) and, unless empty, `authorization` as metadata.
grpc::Status CallRaw(const std::string& address, const std::string& method,
                     const std::string& authorization) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  grpc::CompletionQueue cq;
  grpc::Slice no_bytes("", 0);
  const grpc::ByteBuffer request(&no_bytes, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  auto call = stub.PrepareUnaryCall(&context, method, request, &cq);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  EXPECT_TRUE(cq.Next(&tag, &ok));
  return status;
}

// Each of `methods` on `address` with each of `credentials` is refused as UNAUTHENTICATED.
void ExpectRefused(const std::string& address, const std::vector<std::string>& methods,
                   const std::vector<std::string>& credentials) {
  for (const std::string& method : methods) {
    for (const std::string& credential : credentials) {
      EXPECT_EQ(CallRaw(address, method, credential).error_code(),
                grpc::StatusCode::UNAUTHENTICATED)
          << method << " on " << address << " with '" << credential << "'";
    }
  }
}

// Every method of `service` (its descriptor, so that a method added later is covered too).
std::vector<std::string> Methods(const std::string& service) {
  const auto* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
  EXPECT_NE(descriptor, nullptr) << service;
  std::vector<std::string> methods;
  for (int i = 0; descriptor != nullptr && i < descriptor->method_count(); ++i) {
    methods.push_back("/" + service + "/" + descriptor->method(i)->name());
  }
  return methods;
}

std::vector<std::string> WorkerAddresses(LocalCluster& cluster) {
  auto status = ClusterStatus(cluster);
  EXPECT_TRUE(status.ok()) << status.status();
  std::vector<std::string> addresses;
  if (status.ok()) {
    for (const auto& shard : status->shards()) addresses.push_back(shard.address());
  }
  return addresses;
}

TEST(SecurityAuthz, ClusterCallsNeedTheClusterToken) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  auto cluster = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto before = GenerateGreedy(**cluster, kPrompt, 8);
  ASSERT_TRUE(before.ok()) << before.status();
  const std::vector<std::string> workers = WorkerAddresses(**cluster);
  ASSERT_EQ(workers.size(), 3u);

  const std::vector<std::string> bad = {"", "Bearer wrong-token", "Bearer ", "Basic abc"};
  for (const std::string& address : workers) {
    ExpectRefused(address, Methods("tpserve.v1.WorkerService"), bad);
  }
  ExpectRefused((*cluster)->address(), Methods("tpserve.v1.ClusterService"), bad);
  // A fake rank 1 tries to register, with a well-formed request and no token.
  {
    auto stub = v1::ClusterService::NewStub(
        grpc::CreateChannel((*cluster)->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    v1::RegisterRequest request;
    request.set_rank(1);
    request.set_address("127.0.0.1:1");
    v1::RegisterResponse response;
    EXPECT_EQ(stub->Register(&context, request, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }

  // Nothing changed: the same ranks, the same answer.
  EXPECT_EQ(WorkerAddresses(**cluster), workers);
  auto after = GenerateGreedy(**cluster, kPrompt, 8);
  ASSERT_TRUE(after.ok()) << after.status() << "\n" << LogTails(options);
  EXPECT_EQ(*after, *before);

  // The right token is accepted: Status answers, a StoreGet of a missing key times out.
  const std::string token = "Bearer " + (*cluster)->cluster_token();
  EXPECT_TRUE(CallRaw(workers[0], "/tpserve.v1.WorkerService/Status", token).ok());
  EXPECT_NE(CallRaw((*cluster)->address(), "/tpserve.v1.ClusterService/StoreGet", token)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST(SecurityAuthz, ClientApisNeedAnApiKey) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 1);
  options.http_port = 0;
  options.coordinator_args = {"--api-key", kApiKey};
  auto cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->WaitReady(absl::Seconds(120)).ok()) << LogTails(options);

  httplib::Client http("http://" + (*cluster)->http_address());
  const std::string body = R"({"model": "x", "prompt": "Hello", "max_tokens": 4})";
  for (const char* header : {"", "Bearer wrong", "Bearer "}) {
    httplib::Headers headers;
    if (*header != '\0') headers.emplace("Authorization", header);
    auto res = http.Post("/v1/completions", headers, body, "application/json");
    ASSERT_TRUE(res) << "no HTTP answer";
    EXPECT_EQ(res->status, 401) << "with '" << header << "'";
    const auto error = nlohmann::json::parse(res->body, nullptr, false);
    EXPECT_EQ(error["error"]["code"], "invalid_api_key") << res->body;
    EXPECT_EQ(res->body.find(kApiKey), std::string::npos);
  }
  auto models = http.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto health = http.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  httplib::Headers good = {{"Authorization", std::string("Bearer ") + kApiKey}};
  auto served = http.Post("/v1/completions", good,
                          R"({"model": ")" + std::string("SmolLM2-135M-Instruct.Q4_1") +
                              R"(", "prompt": "Hello", "max_tokens": 4})",
                          "application/json");
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200) << served->body;

  const std::string address = (*cluster)->address();
  ExpectRefused(address,
                {"/tpserve.v1.InferenceService/Score", "/tpserve.v1.InferenceService/Tokenize",
                 "/tpserve.v1.InferenceService/ListModels"},
                {"", "Bearer wrong"});
  EXPECT_TRUE(CallRaw(address, "/tpserve.v1.InferenceService/Health", "").ok());
  EXPECT_TRUE(CallRaw(address, "/tpserve.v1.InferenceService/ListModels",
                      std::string("Bearer ") + kApiKey)
                  .ok());
  {
    auto stub = v1::InferenceService::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    v1::GenerateRequest request;
    request.set_text("Hello");
    request.set_max_tokens(2);
    v1::GenerateResponse chunk;
    grpc::ClientContext refused;
    auto reader = stub->Generate(&refused, request);
    while (reader->Read(&chunk)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
    grpc::ClientContext allowed;
    allowed.AddMetadata("authorization", std::string("Bearer ") + kApiKey);
    auto ok_reader = stub->Generate(&allowed, request);
    int chunks = 0;
    while (ok_reader->Read(&chunk)) ++chunks;
    EXPECT_TRUE(ok_reader->Finish().ok());
    EXPECT_GT(chunks, 0);
  }
}

// Drain, Undrain and FlushPrefixCache need the admin key; ClusterStatus stays readable.
TEST(SecurityAuthz, AdminOperationsNeedTheAdminKey) {
  char dir[] = "/tmp/tpserve-admin-key-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string key_file = std::string(dir) + "/admin-key";
  std::ofstream(key_file) << "admin-secret-42\n";
  const std::string wrong_file = std::string(dir) + "/wrong-key";
  std::ofstream(wrong_file) << "not-the-key\n";
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 1);
  options.http_port = 0;
  options.coordinator_args = {"--admin-key-file", key_file};
  auto cluster = StartServing(options, absl::Seconds(120));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string address = (*cluster)->address();
  ExpectRefused(address,
                {"/tpserve.v1.AdminService/Drain", "/tpserve.v1.AdminService/Undrain",
                 "/tpserve.v1.AdminService/FlushPrefixCache"},
                {"", "Bearer not-the-key"});
  EXPECT_TRUE(CallRaw(address, "/tpserve.v1.AdminService/ClusterStatus", "").ok());
  httplib::Client http("http://" + (*cluster)->http_address());
  auto ready = http.Get("/health/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << "refused drains must not drain";

  const std::string tpctl = std::string(TPSERVE_BIN_DIR) + "/tpctl";
  const auto exited_zero = [](const CommandResult& r) {
    return r.finished && WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0;
  };
  const CommandResult refused = RunCommand(
      {tpctl, "--coordinator", address, "--admin-key-file", wrong_file, "drain"}, absl::Seconds(10));
  EXPECT_FALSE(exited_zero(refused)) << refused.output;
  const CommandResult drained = RunCommand(
      {tpctl, "--coordinator", address, "--admin-key-file", key_file, "drain"}, absl::Seconds(10));
  EXPECT_TRUE(exited_zero(drained)) << drained.output;
  ready = http.Get("/health/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  const CommandResult undrained = RunCommand(
      {tpctl, "--coordinator", address, "undrain", "--admin-key-file", key_file},
      absl::Seconds(10));
  EXPECT_TRUE(exited_zero(undrained)) << undrained.output;
  ready = http.Get("/health/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  EXPECT_TRUE(GenerateGreedy(**cluster, kPrompt, 2).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tpserve::testing
