// GlooCommunicator across real processes (rank_processes.h) talking TCP over 127.0.0.1.
#include "worker/comm/gloo_communicator.h"

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/comm/collective_checks.h"
#include "tests/unit/worker/comm/rank_processes.h"

namespace tpserve::comm_test {
namespace {

GlooOptions TestOptions() {
  GlooOptions options;
  options.host = "127.0.0.1";
  options.connect_timeout = absl::Seconds(20);
  options.operation_timeout = absl::Seconds(20);
  return options;
}

constexpr absl::Duration kWorldTimeout = absl::Seconds(60);

// Each *Rank function below is one rank's side of a scenario, run in its own process.

absl::StatusOr<std::string> AllReduceRank(int world_size, int rank, Store store) {
  auto comm = GlooCommunicator::Create(rank, world_size, store, TestOptions());
  if (!comm.ok()) return comm.status();
  if ((*comm)->rank() != rank || (*comm)->world_size() != world_size) {
    return absl::InternalError("rank() or world_size() is wrong");
  }
  return CheckAllReduce(**comm, {1, 1000, int64_t{1} << 20});
}

// A rank that sends nothing finishes the gather at once; were it to exit then, a peer still
// connecting its other pairs would read the closed socket and fail. So every rank waits at the
// store until all have gathered.
absl::StatusOr<std::string> GatherRank(const std::vector<int64_t>& counts, int rank, Store store) {
  const int world_size = static_cast<int>(counts.size());
  auto comm = GlooCommunicator::Create(rank, world_size, store, TestOptions());
  if (!comm.ok()) return comm.status();
  absl::StatusOr<std::string> result = CheckGather(**comm, counts);
  std::vector<std::string> gathered;
  for (int r = 0; r < world_size; ++r) gathered.push_back(absl::StrCat("gathered_", r));
  const std::string mine = gathered[rank];
  try {
    store->set(mine, std::vector<char>(mine.begin(), mine.end()));
    store->wait(gathered);
  } catch (const std::exception& e) {
    return absl::DeadlineExceededError(absl::StrCat("waiting for the other ranks: ", e.what()));
  }
  return result;
}

// Joins a world of 3 in which rank `missing` never starts: Create must fail with
// DEADLINE_EXCEEDED naming this rank and the missing one, within the connect timeout (plus
// slack for the store's polling).
absl::StatusOr<std::string> MissingPeerRank(int missing, absl::Duration connect_timeout, int rank,
                                            Store store) {
  GlooOptions options = TestOptions();
  options.connect_timeout = connect_timeout;
  const absl::Time begin = absl::Now();
  auto comm = GlooCommunicator::Create(rank, 3, store, options);
  return CheckMissingPeer(comm.status(), absl::Now() - begin, rank, 3, missing, connect_timeout);
}

// World of 3; rank 2 exits after one all-reduce. The survivors' next all-reduce must fail (not
// hang, not die of SIGPIPE) with UNAVAILABLE or DEADLINE_EXCEEDED naming their rank, and the
// error must stick.
absl::StatusOr<std::string> PeerExitRank(int rank, Store store) {
  GlooOptions options = TestOptions();
  options.operation_timeout = absl::Seconds(3);
  auto comm = GlooCommunicator::Create(rank, 3, store, options);
  if (!comm.ok()) return comm.status();
  std::vector<float> data(1000, 1.0f);
  if (absl::Status s = (*comm)->AllReduceSum(data.data(), 1000); !s.ok()) return s;
  if (rank == 2) return std::string("exiting early");
  // 16 MiB: large enough that the survivors often write to the dead peer's socket (SIGPIPE).
  data.assign(1 << 22, 1.0f);
  const absl::Status first = (*comm)->AllReduceSum(data.data(), 1 << 22);
  const absl::Status again = (*comm)->AllReduceSum(data.data(), 1 << 22);
  return CheckStickyFailure(first, again, rank, 3,
                            {absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded});
}

class GlooWorldTest : public testing::TestWithParam<int> {};

TEST_P(GlooWorldTest, AllReduceSumIsExact) {
  const int world_size = GetParam();
  ExpectAllPassed(RunRanks(AllRanks(world_size), kWorldTimeout, [&](int rank, Store store) {
    return AllReduceRank(world_size, rank, store);
  }));
}

// Inexact sums: the bits of the rank-order sum for every count, odd ones and fewer floats than
// ranks included, so that a step's results do not depend on its batch.
TEST_P(GlooWorldTest, EveryRankGetsTheRankOrderSum) {
  const int world_size = GetParam();
  ExpectAllPassed(RunRanks(AllRanks(world_size), kWorldTimeout,
                           [&](int rank, Store store) -> absl::StatusOr<std::string> {
                             auto comm =
                                 GlooCommunicator::Create(rank, world_size, store, TestOptions());
                             if (!comm.ok()) return comm.status();
                             return CheckRankOrderSum(**comm, {1, 2, 999, 200003});
                           }));
}

TEST_P(GlooWorldTest, GatherToRootConcatenatesInRankOrder) {
  // Uneven counts; the world of 4 includes a rank that sends nothing.
  const std::vector<int64_t> counts =
      GetParam() == 3 ? std::vector<int64_t>{5, 3, 4} : std::vector<int64_t>{5, 3, 0, 4};
  ExpectAllPassed(RunRanks(AllRanks(GetParam()), kWorldTimeout,
                           [&](int rank, Store store) { return GatherRank(counts, rank, store); }));
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooWorldTest, testing::Values(3, 4),
                         [](const auto& info) { return absl::StrCat("world", info.param); });

class MissingRankTest : public testing::TestWithParam<int> {};

TEST_P(MissingRankTest, PeersFailWithinConnectTimeout) {
  const int missing = GetParam();
  constexpr absl::Duration kConnectTimeout = absl::Seconds(3);
  const std::vector<int> ranks = AllRanksBut(3, missing);
  const absl::Time start = absl::Now();
  const std::vector<RankResult> results =
      RunRanks(ranks, kConnectTimeout + absl::Seconds(10), [&](int rank, Store store) {
        return MissingPeerRank(missing, kConnectTimeout, rank, store);
      });
  EXPECT_LT(absl::Now() - start, kConnectTimeout + absl::Seconds(3));
  ExpectAllPassed(results);
  for (const RankResult& result : results) {
    std::printf("rank %d: %s\n", result.rank, result.message.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(MissingRank, MissingRankTest, testing::Values(0, 2),
                         [](const auto& info) { return absl::StrCat("rank", info.param); });

TEST(GlooCommunicatorTest, PeerExitBreaksTheGroup) {
  ExpectAllPassed(RunRanks(AllRanks(3), kWorldTimeout, PeerExitRank));
}

TEST(GlooCommunicatorTest, AbortEndsAWaitForASilentPeer) {
  ExpectAllPassed(RunRanks(AllRanks(3), kWorldTimeout, [](int rank, Store store) {
    auto comm = GlooCommunicator::Create(rank, 3, store, TestOptions());  // 20 s per operation
    if (!comm.ok()) return absl::StatusOr<std::string>(comm.status());
    return CheckAbandonedWait(**comm, absl::Seconds(6), absl::Milliseconds(500));
  }));
}

TEST(GlooCommunicatorTest, CreateRejectsBadArguments) {
  GlooOptions zero_timeout;
  zero_timeout.connect_timeout = absl::ZeroDuration();
  ExpectCreateRejectsBadArguments<GlooCommunicator>(zero_timeout);
}

}  // namespace
}  // namespace tpserve::comm_test
