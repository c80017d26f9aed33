#include "tests/integration/cluster_test_util.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tpserve/v1/admin.grpc.pb.h"

namespace tpserve::testing {
namespace {

std::string MakeTempDir(const std::string& prefix) {
  std::string path = "/tmp/" + prefix + "-XXXXXX";
  return mkdtemp(path.data());
}

std::string Tail(const std::string& path, int lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
       i < all.size(); ++i) {
    absl::StrAppend(&out, all[i], "\n");
  }
  return out;
}

}  // namespace

LocalClusterOptions ClusterOptions(const std::string& model, int world_size) {
  LocalClusterOptions options;
  options.bin_dir = TPSERVE_BIN_DIR;
  options.model = model;
  options.world_size = world_size;
  options.log_dir = MakeTempDir("tpserve-test-logs");
  return options;
}

std::string LogTails(const LocalClusterOptions& options, int lines) {
  std::string out;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(options.log_dir, error)) {
    absl::StrAppend(&out, "---- ", entry.path().filename().string(), "\n",
                    Tail(entry.path().string(), lines));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<LocalCluster>> StartServing(const LocalClusterOptions& options,
                                                           absl::Duration timeout) {
  auto cluster = LocalCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  const absl::Status ready = (*cluster)->WaitReady(timeout);
  if (!ready.ok()) {
    return absl::Status(ready.code(), absl::StrCat(ready.message(), "\n", LogTails(options)));
  }
  return cluster;
}

absl::StatusOr<std::vector<std::vector<float>>> Score(LocalCluster& cluster,
                                                      const std::vector<int32_t>& ids) {
  v1::ScoreRequest request;
  for (int32_t id : ids) request.mutable_prompt()->add_ids(id);
  v1::ScoreResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  const grpc::Status status = cluster.inference().Score(&context, request, &response);
  if (!status.ok()) return absl::UnavailableError("Score: " + status.error_message());
  std::vector<std::vector<float>> logits;
  for (const auto& position : response.positions()) {
    logits.emplace_back(position.logits().begin(), position.logits().end());
  }
  return logits;
}

v1::GenerateRequest GreedyRequest(const std::vector<int32_t>& ids, int max_tokens) {
  v1::GenerateRequest request;
  for (int32_t id : ids) request.mutable_token_ids()->add_ids(id);
  request.set_max_tokens(max_tokens);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0.0f);
  return request;
}

absl::StatusOr<std::vector<int32_t>> GenerateGreedy(LocalCluster& cluster,
                                                    const std::vector<int32_t>& ids,
                                                    int max_tokens) {
  const v1::GenerateRequest request = GreedyRequest(ids, max_tokens);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  auto reader = cluster.inference().Generate(&context, request);
  std::vector<int32_t> out;
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) out.insert(out.end(), chunk.token_ids().begin(), chunk.token_ids().end());
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return absl::UnavailableError("Generate: " + status.error_message());
  return out;
}

absl::StatusOr<v1::ClusterStatusResponse> ClusterStatus(LocalCluster& cluster) {
  auto stub = v1::AdminService::NewStub(cluster.tls().Channel(cluster.admin_address()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ClusterStatusResponse response;
  const grpc::Status status = stub->ClusterStatus(&context, {}, &response);
  if (!status.ok()) return absl::UnavailableError("ClusterStatus: " + status.error_message());
  return response;
}

std::vector<std::vector<int32_t>> GoldenPromptIds() {
  std::ifstream in(std::string(TPSERVE_GOLDEN_DIR) + "/logits_top20.json");
  const nlohmann::json json = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& entry : json) prompts.push_back(entry["ids"].get<std::vector<int32_t>>());
  return prompts;
}

CommandResult RunCommand(const std::vector<std::string>& argv, absl::Duration limit) {
  const std::string dir = MakeTempDir("tpserve-cmd");
  const std::string log = dir + "/output.log";
  CommandResult result;
  const absl::Time start = absl::Now();
  auto process = Subprocess::Start(argv, log);
  if (!process.ok()) {
    result.output = std::string(process.status().message());
    return result;
  }
  const std::optional<int> status = process->Wait(limit);
  result.finished = status.has_value();
  result.wait_status = status.has_value() ? *status : process->Stop(absl::Seconds(1));
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  result.output = text.str();
  std::filesystem::remove_all(dir);
  return result;
}

bool WaitForServing(LocalCluster& cluster, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    v1::HealthResponse health;
    if (cluster.inference().Health(&context, v1::HealthRequest(), &health).ok() &&
        health.state() == v1::HealthResponse::STATE_SERVING) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  return false;
}

absl::StatusOr<ServingCluster> StartWithAnswer(const LocalClusterOptions& options) {
  ServingCluster serving;
  ASSIGN_OR_RETURN(serving.cluster, StartServing(options, absl::Seconds(120)));
  serving.prompt = GoldenPromptIds().front();
  ASSIGN_OR_RETURN(serving.answer, GenerateGreedy(*serving.cluster, serving.prompt, 8));
  return serving;
}

void ExpectServesAgain(ServingCluster& serving, const LocalClusterOptions& options,
                       absl::Time restarted, const char* test) {
  ASSERT_TRUE(WaitForServing(*serving.cluster, absl::Seconds(120))) << LogTails(options);
  std::printf("%s: serving again %.2f s after the restart\n", test,
              absl::ToDoubleSeconds(absl::Now() - restarted));
  const auto after =
      GenerateGreedy(*serving.cluster, serving.prompt, static_cast<int>(serving.answer.size()));
  ASSERT_TRUE(after.ok()) << after.status() << "\n" << LogTails(options);
  EXPECT_EQ(*after, serving.answer);
}

}  // namespace tpserve::testing
