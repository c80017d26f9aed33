// SIGKILL one worker mid-generation with --recovery-grace 0 (requests are not held for the rank
// to return; survive_worker_loss covers holding them): the request fails with a clear error
// within the step deadline, the coordinator stays up, reports the cluster degraded and refuses
// new requests.
// Then the worker is started again, as a supervisor (Kubernetes) would: the coordinator re-forms
// the group by itself and serves again, answering as it did before the crash.
#include <signal.h>

#include <filesystem>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

TEST(WorkerCrashDuringStep, RequestFailsClusterDegradesThenRecoversWhenTheWorkerReturns) {
  constexpr int kStepTimeoutS = 10;
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  options.coordinator_args = {"--step-timeout", std::to_string(kStepTimeoutS), "--recovery-grace",
                              "0"};
  auto serving = StartWithAnswer(options);
  ASSERT_TRUE(serving.ok()) << serving.status();
  LocalCluster& cluster = *serving->cluster;

  v1::GenerateRequest request;
  request.set_text("Tell me a very long story about a lighthouse keeper.");
  request.set_max_tokens(4000);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0.0f);
  grpc::ClientContext context;
  auto reader = cluster.inference().Generate(&context, request);
  v1::GenerateResponse chunk;
  int chunks = 0;
  while (chunks < 5 && reader->Read(&chunk)) ++chunks;
  ASSERT_EQ(chunks, 5) << LogTails(options);

  cluster.worker(1)->Signal(SIGKILL);
  const absl::Time killed = absl::Now();
  while (reader->Read(&chunk)) {
  }
  const grpc::Status status = reader->Finish();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - killed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_NE(status.error_message().find("rank 1"), std::string::npos) << status.error_message();
  EXPECT_LE(seconds, kStepTimeoutS + 5);
  std::printf("worker_crash_during_step: request failed after %.2f s: %s\n", seconds,
              status.error_message().c_str());

  EXPECT_FALSE(cluster.coordinator().Poll().has_value()) << "the coordinator exited";
  grpc::ClientContext health_context;
  v1::HealthResponse health;
  ASSERT_TRUE(cluster.inference().Health(&health_context, v1::HealthRequest(), &health).ok());
  EXPECT_EQ(health.state(), v1::HealthResponse::STATE_DEGRADED) << health.message();

  grpc::ClientContext refused_context;
  auto refused = cluster.inference().Generate(&refused_context, request);
  while (refused->Read(&chunk)) {
  }
  const grpc::Status refused_status = refused->Finish();
  EXPECT_EQ(refused_status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(refused_status.error_message().find("degraded"), std::string::npos)
      << refused_status.error_message();

  ASSERT_TRUE(cluster.RestartWorker(1).ok());
  ExpectServesAgain(*serving, options, absl::Now(), "worker_crash_during_step");
  cluster.StopAll();
  std::filesystem::remove_all(options.log_dir);
}

}  // namespace
}  // namespace tpserve::testing
