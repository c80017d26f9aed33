// ClusterService through a real gRPC server on 127.0.0.1, as workers call it.
#include "coordinator/cluster_service.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

class ClusterServiceTest : public ::testing::Test {
 protected:
  void Start(int world_size) {
    service_ = std::make_unique<ClusterServiceImpl>(
        world_size, [this](const std::string& address) { return live_.load(); });
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    stub_ = v1::ClusterService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                            grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  grpc::Status Register(int rank, const std::string& address, int pid) {
    v1::RegisterRequest request;
    request.set_rank(rank);
    request.set_address(address);
    request.set_hostname("host");
    request.set_pid(pid);
    v1::RegisterResponse response;
    grpc::ClientContext context;
    return stub_->Register(&context, request, &response);
  }
  grpc::Status Leave(int rank, const std::string& address, int pid, bool* drained) {
    v1::LeaveRequest request;
    request.set_rank(rank);
    request.set_address(address);
    request.set_pid(pid);
    v1::LeaveResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub_->Leave(&context, request, &response);
    *drained = response.drained();
    return status;
  }
  grpc::Status Set(const std::string& key, const std::string& value) {
    v1::StoreSetRequest request;
    request.set_key(key);
    request.set_value(value);
    v1::StoreSetResponse response;
    grpc::ClientContext context;
    return stub_->StoreSet(&context, request, &response);
  }
  grpc::Status Get(const std::string& key, int64_t timeout_ms, std::string* value) {
    v1::StoreGetRequest request;
    request.set_key(key);
    request.set_timeout_ms(timeout_ms);
    v1::StoreGetResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub_->StoreGet(&context, request, &response);
    *value = response.value();
    return status;
  }

  std::atomic<bool> live_{true};  // what the liveness probe answers
  std::unique_ptr<ClusterServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ClusterService::Stub> stub_;
};

TEST_F(ClusterServiceTest, AllRanksRegister) {
  Start(2);
  ASSERT_TRUE(Register(1, "127.0.0.1:2001", 11).ok());
  EXPECT_EQ(service_->MissingRanks(), "0");
  ASSERT_TRUE(Register(0, "127.0.0.1:2000", 10).ok());
  auto workers = service_->WaitForAllRanks(absl::Now() + absl::Seconds(5), nullptr);
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->size(), 2u);
  EXPECT_EQ((*workers)[0].address, "127.0.0.1:2000");
  EXPECT_EQ((*workers)[1].address, "127.0.0.1:2001");
  EXPECT_EQ((*workers)[1].pid, 11);
}

TEST_F(ClusterServiceTest, RankOutsideTheWorldIsInvalid) {
  Start(3);
  grpc::Status status = Register(3, "127.0.0.1:2003", 13);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("rank 3"), std::string::npos) << status.error_message();
  EXPECT_EQ(Register(-1, "127.0.0.1:2003", 13).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ClusterServiceTest, DuplicateOfALiveRankIsRefusedNamingBothAddresses) {
  Start(3);
  ASSERT_TRUE(Register(1, "127.0.0.1:2001", 11).ok());
  EXPECT_TRUE(Register(1, "127.0.0.1:2001", 11).ok()) << "the same worker retrying";
  grpc::Status status = Register(1, "127.0.0.1:2999", 99);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  const std::string& message = status.error_message();
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  EXPECT_NE(message.find("127.0.0.1:2001"), std::string::npos) << message;
  EXPECT_NE(message.find("127.0.0.1:2999"), std::string::npos) << message;
}

TEST_F(ClusterServiceTest, RestartedWorkerReplacesADeadOne) {
  Start(1);
  ASSERT_TRUE(Register(0, "127.0.0.1:2000", 10).ok());
  live_ = false;
  ASSERT_TRUE(Register(0, "127.0.0.1:2100", 20).ok());
  auto workers = service_->WaitForAllRanks(absl::Now() + absl::Seconds(5), nullptr);
  ASSERT_TRUE(workers.ok());
  EXPECT_EQ((*workers)[0].address, "127.0.0.1:2100");
}

TEST_F(ClusterServiceTest, OnlyTheRegisteredWorkerOfARankMayLeave) {
  Start(2);
  ASSERT_TRUE(Register(1, "127.0.0.1:2001", 11).ok());
  std::vector<int> drained_for;
  service_->SetLeaveHandler([&drained_for](int rank) {
    drained_for.push_back(rank);
    return false;
  });
  bool drained = true;
  EXPECT_EQ(Leave(1, "127.0.0.1:2999", 11, &drained).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Leave(1, "127.0.0.1:2001", 99, &drained).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Leave(0, "127.0.0.1:2000", 10, &drained).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(drained_for.empty());
  ASSERT_TRUE(Leave(1, "127.0.0.1:2001", 11, &drained).ok());
  EXPECT_EQ(drained_for, std::vector<int>{1});
  EXPECT_FALSE(drained) << "the handler's answer";
  service_->SetLeaveHandler(nullptr);
  ASSERT_TRUE(Leave(1, "127.0.0.1:2001", 11, &drained).ok());
  EXPECT_TRUE(drained) << "nothing to drain before the engine serves";
}

TEST_F(ClusterServiceTest, WaitForAllRanksNamesTheMissingOnes) {
  Start(4);
  ASSERT_TRUE(Register(0, "127.0.0.1:2000", 10).ok());
  ASSERT_TRUE(Register(2, "127.0.0.1:2002", 12).ok());
  auto workers = service_->WaitForAllRanks(absl::Now() + absl::Milliseconds(200), nullptr);
  EXPECT_EQ(workers.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(workers.status().message().find("1, 3"), std::string::npos) << workers.status();
}

TEST_F(ClusterServiceTest, StoreGetWaitsForTheKey) {
  Start(1);
  std::thread setter([this] {
    absl::SleepFor(absl::Milliseconds(300));
    ASSERT_TRUE(Set("group/rank0", "abc").ok());
  });
  const absl::Time start = absl::Now();
  std::string value;
  grpc::Status status = Get("group/rank0", 5000, &value);
  setter.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(value, "abc");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  // Present keys answer at once.
  ASSERT_TRUE(Get("group/rank0", 1, &value).ok());
  EXPECT_EQ(value, "abc");
}

TEST_F(ClusterServiceTest, StoreGetTimesOut) {
  Start(1);
  ASSERT_TRUE(Set("other", "x").ok());
  const absl::Time start = absl::Now();
  std::string value;
  grpc::Status status = Get("group/missing", 300, &value);
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(status.error_message().find("group/missing"), std::string::npos);
  EXPECT_GE(waited, absl::Milliseconds(280));
  EXPECT_LT(waited, absl::Seconds(3));
}

// However many calls a client makes, the store holds at most kMaxStoreBytes: oversized keys or
// values are refused, and so is growth past the total, while overwriting a key stays allowed.
TEST_F(ClusterServiceTest, StoreIsBounded) {
  Start(1);
  EXPECT_EQ(Set(std::string(kMaxStoreKeyBytes + 1, 'k'), "v").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Set("big", std::string(kMaxStoreValueBytes + 1, 'v')).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  const std::string value(kMaxStoreValueBytes, 'v');
  int stored = 0;
  grpc::Status status;
  while ((status = Set("key" + std::to_string(stored), value)).ok()) ++stored;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_LE(static_cast<int64_t>(stored) * kMaxStoreValueBytes, kMaxStoreBytes);
  EXPECT_GE(static_cast<int64_t>(stored + 1) * kMaxStoreValueBytes, kMaxStoreBytes);
  EXPECT_TRUE(Set("key0", "small").ok());  // replacing frees room
  std::string got;
  ASSERT_TRUE(Get("key0", 100, &got).ok());
  EXPECT_EQ(got, "small");
}

// A re-formed group leaves nothing of its predecessor's rendezvous behind.
TEST_F(ClusterServiceTest, ClearGroupForgetsOnlyThatGroupsKeys) {
  Start(1);
  ASSERT_TRUE(Set("g1/rank0", "a").ok());
  ASSERT_TRUE(Set("g1/rank1", "b").ok());
  ASSERT_TRUE(Set("g10/rank0", "c").ok());
  service_->ClearGroup("g1");
  std::string value;
  EXPECT_EQ(Get("g1/rank0", 50, &value).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(Get("g1/rank1", 50, &value).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  ASSERT_TRUE(Get("g10/rank0", 50, &value).ok());
  EXPECT_EQ(value, "c");
  // The bytes were given back: the whole budget is there again.
  const std::string big(kMaxStoreValueBytes, 'v');
  int stored = 0;
  while (Set("g2/" + std::to_string(stored), big).ok()) ++stored;
  service_->ClearGroup("g2");
  int again = 0;
  while (Set("g3/" + std::to_string(again), big).ok()) ++again;
  EXPECT_EQ(again, stored);
}

}  // namespace
}  // namespace tpserve
