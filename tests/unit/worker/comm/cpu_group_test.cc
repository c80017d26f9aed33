// The choice between shared memory and Gloo, made together by forked ranks through a FileStore.
#include "worker/comm/cpu_group.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/comm/collective_checks.h"
#include "tests/unit/worker/comm/private_shm.h"
#include "tests/unit/worker/comm/rank_processes.h"

namespace tpserve::comm_test {
namespace {

constexpr absl::Duration kWorldTimeout = absl::Seconds(60);

CpuGroupOptions Options(CpuTransport transport) {
  CpuGroupOptions options;
  options.transport = transport;
  options.gloo.host = "127.0.0.1";
  options.gloo.connect_timeout = options.shm.connect_timeout = absl::Seconds(20);
  return options;
}

// Joins with `transport`, expects the group to have chosen shared memory (`want_shm`) or Gloo,
// then all-reduces through it.
absl::StatusOr<std::string> JoinAndCheck(int rank, int world_size, Store store,
                                         CpuTransport transport, bool want_shm) {
  absl::StatusOr<CpuGroup> group = CreateCpuGroup(rank, world_size, store, Options(transport));
  if (!group.ok()) return group.status();
  const bool is_shm = dynamic_cast<ShmCommunicator*>(group->comm.get()) != nullptr;
  const bool is_gloo = dynamic_cast<GlooCommunicator*>(group->comm.get()) != nullptr;
  if (is_shm != want_shm || is_gloo == want_shm ||
      !absl::StartsWith(group->transport, want_shm ? "shared memory" : "Gloo over TCP (")) {
    return absl::InternalError(absl::StrCat("want ", want_shm ? "shared memory" : "Gloo", "; got '",
                                            group->transport, "'"));
  }
  absl::StatusOr<std::string> checked = CheckAllReduce(*group->comm, {1000});
  if (!checked.ok()) return checked;
  return group->transport;
}

TEST(CpuGroupTest, AutoUsesSharedMemoryWhenEveryRankCanMapIt) {
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        return JoinAndCheck(rank, 3, store, CpuTransport::kAuto, /*want_shm=*/true);
      }));
}

TEST(CpuGroupTest, OneRankAskingForGlooSendsTheGroupToGloo) {
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        return JoinAndCheck(rank, 3, store, rank == 1 ? CpuTransport::kGloo : CpuTransport::kAuto,
                            /*want_shm=*/false);
      }));
}

// Pods of one Kubernetes node: same host, separate /dev/shm.
TEST(CpuGroupTest, RankWithoutTheSharedDevShmSendsTheGroupToGloo) {
  if (absl::Status s = CanGivePrivateDevShm(); !s.ok()) GTEST_SKIP() << s;
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        if (rank == 2) {
          if (absl::Status s = GivePrivateDevShm(); !s.ok()) {
            return s;
          }
        }
        return JoinAndCheck(rank, 3, store, CpuTransport::kAuto, /*want_shm=*/false);
      }));
}

TEST(CpuGroupTest, ForcedSharedMemoryFailsInsteadOfFallingBack) {
  ExpectAllPassed(RunRanks(
      AllRanks(2), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        CpuGroupOptions options = Options(rank == 0 ? CpuTransport::kShm : CpuTransport::kGloo);
        options.gloo.connect_timeout = absl::Seconds(2);
        const absl::Status status = CreateCpuGroup(rank, 2, store, options).status();
        // Rank 1 goes on to Gloo and waits there for rank 0, which never comes.
        const absl::StatusCode want =
            rank == 0 ? absl::StatusCode::kFailedPrecondition : absl::StatusCode::kDeadlineExceeded;
        if (status.code() != want) {
          return absl::InternalError(
              absl::StrCat("want ", absl::StatusCodeToString(want), "; got ", status.ToString()));
        }
        return status.ToString();
      }));
}

TEST(CpuGroupTest, ParsesTransportNames) {
  EXPECT_EQ(*ParseCpuTransport("auto"), CpuTransport::kAuto);
  EXPECT_EQ(*ParseCpuTransport("shm"), CpuTransport::kShm);
  EXPECT_EQ(*ParseCpuTransport("gloo"), CpuTransport::kGloo);
  EXPECT_EQ(ParseCpuTransport("tcp").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve::comm_test
