// ShmCommunicator across real processes (rank_processes.h) on this host: exact sums and gathers
// for every size path, failures (a dead, departed, missing or stalled peer), a slow peer that is
// waited for without burning the CPU, the segment's removal, and the group-wide refusal that
// sends everyone to Gloo.
#include "worker/comm/shm_communicator.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/comm/collective_checks.h"
#include "tests/unit/worker/comm/private_shm.h"
#include "tests/unit/worker/comm/rank_processes.h"

namespace tpserve::comm_test {
namespace {

constexpr absl::Duration kWorldTimeout = absl::Seconds(60);

ShmOptions TestOptions(int64_t chunk_bytes = ShmOptions().chunk_bytes,
                       absl::Duration operation_timeout = absl::Seconds(20)) {
  ShmOptions options;
  options.connect_timeout = absl::Seconds(20);
  options.operation_timeout = operation_timeout;
  options.chunk_bytes = chunk_bytes;
  return options;
}

absl::StatusOr<std::unique_ptr<ShmCommunicator>> Join(int rank, int world_size, Store store,
                                                      const ShmOptions& options = TestOptions()) {
  auto comm = ShmCommunicator::Create(rank, world_size, std::move(store), options);
  if (comm.ok() && ((*comm)->rank() != rank || (*comm)->world_size() != world_size)) {
    return absl::InternalError("rank() or world_size() is wrong");
  }
  return comm;
}

// CPU seconds this process has used, user and system.
double CpuSeconds() {
  rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec * 1e-6;
}

// `status` must have `code` and say `text`, and have come `took` after the call began, within
// [`min_took`, `max_took`].
absl::StatusOr<std::string> ExpectError(const absl::Status& status, absl::StatusCode code,
                                        absl::string_view text,
                                        absl::Duration took = absl::ZeroDuration(),
                                        absl::Duration min_took = absl::ZeroDuration(),
                                        absl::Duration max_took = absl::InfiniteDuration()) {
  if (status.code() != code || !absl::StrContains(status.message(), text) || took < min_took ||
      took > max_took) {
    return absl::InternalError(
        absl::StrCat("want ", absl::StatusCodeToString(code), " saying '", text, "' within [",
                     absl::FormatDuration(min_took), ", ", absl::FormatDuration(max_took),
                     "]; got ", status.ToString(), " after ", absl::FormatDuration(took)));
  }
  return status.ToString();
}

// {world size, chunk bytes}
class ShmWorldTest : public testing::TestWithParam<std::tuple<int, int64_t>> {
 protected:
  int world_size() const { return std::get<0>(GetParam()); }
  int64_t chunk_bytes() const { return std::get<1>(GetParam()); }
};

TEST_P(ShmWorldTest, AllReduceSumIsExact) {
  // 1 float; odd counts; both sides of the 64 KiB one-barrier limit; several chunks, the last one
  // short. With 4 KiB chunks everything above 1,024 floats is chunked.
  const std::vector<int64_t> counts = {1, 7, 1000, 1023, 16384, 16385, (1 << 20) + 3};
  ExpectAllPassed(RunRanks(AllRanks(world_size()), kWorldTimeout,
                           [&](int rank, Store store) -> absl::StatusOr<std::string> {
                             auto comm =
                                 Join(rank, world_size(), store, TestOptions(chunk_bytes()));
                             if (!comm.ok()) return comm.status();
                             return CheckAllReduce(**comm, counts);
                           }));
}

TEST_P(ShmWorldTest, GatherToRootConcatenatesInRankOrder) {
  // Unequal counts, a rank that sends nothing, pieces of several chunks, and nothing at all.
  std::vector<std::vector<int64_t>> cases = {std::vector<int64_t>(world_size(), 0)};
  std::vector<int64_t> uneven;
  for (int r = 0; r < world_size(); ++r) uneven.push_back(r == 1 ? 0 : 5 + r);
  cases.push_back(uneven);
  uneven[0] = 300001;  // more than one 1 MiB chunk
  cases.push_back(uneven);
  ExpectAllPassed(RunRanks(AllRanks(world_size()), kWorldTimeout,
                           [&](int rank, Store store) -> absl::StatusOr<std::string> {
                             auto comm =
                                 Join(rank, world_size(), store, TestOptions(chunk_bytes()));
                             if (!comm.ok()) return comm.status();
                             for (const std::vector<int64_t>& counts : cases) {
                               absl::StatusOr<std::string> checked = CheckGather(**comm, counts);
                               if (!checked.ok()) return checked;
                             }
                             return "ok";
                           }));
}

// Inexact sums, for a message below the one-barrier limit and for a chunked one.
TEST_P(ShmWorldTest, EveryRankGetsTheRankOrderSum) {
  const int n = world_size();
  ExpectAllPassed(RunRanks(AllRanks(n), kWorldTimeout,
                           [&](int rank, Store store) -> absl::StatusOr<std::string> {
                             auto comm = Join(rank, n, store, TestOptions(chunk_bytes()));
                             if (!comm.ok()) return comm.status();
                             return CheckRankOrderSum(**comm, {999, 200003});
                           }));
}

// Byte i of a message of `size`: differs between messages and positions.
std::string Message(size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + size * 7) % 251);
  return bytes;
}

// Nothing; fewer bytes than fit after the length; exactly a 4 KiB chunk with it and one more;
// messages of several chunks at either chunk size. Another rank's old bytes are replaced.
TEST_P(ShmWorldTest, BroadcastBytesReplacesEveryRanksBytesWithRank0s) {
  const std::vector<size_t> sizes = {0, 5, 4088, 4089, 100000, (size_t{3} << 20) + 17};
  ExpectAllPassed(RunRanks(
      AllRanks(world_size()), kWorldTimeout,
      [&](int rank, Store store) -> absl::StatusOr<std::string> {
        auto comm = Join(rank, world_size(), store, TestOptions(chunk_bytes()));
        if (!comm.ok()) return comm.status();
        for (size_t size : sizes) {
          std::string bytes = rank == 0 ? Message(size) : std::string(size + 3, 'x');
          if (absl::Status s = (*comm)->BroadcastBytes(&bytes, /*await_root=*/false); !s.ok()) {
            return s;
          }
          if (bytes != Message(size)) {
            return absl::InternalError(absl::StrCat("a message of ", size, " bytes arrived as ",
                                                    bytes.size(), " other bytes"));
          }
        }
        return "ok";
      }));
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShmWorldTest,
                         testing::Combine(testing::Values(2, 3, 4),
                                          testing::Values(int64_t{4096}, int64_t{1} << 20)),
                         [](const auto& info) {
                           return absl::StrCat("world", std::get<0>(info.param), "_chunk",
                                               std::get<1>(info.param) >> 10, "KiB");
                         });

TEST(ShmCommunicatorTest, SegmentIsGoneFromDevShmOnceCreateReturns) {
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        auto comm = Join(rank, 3, store);
        if (!comm.ok()) return comm.status();
        const std::string& name = (*comm)->segment_name();
        if (!absl::StartsWith(name, "/tpserve-") || name.size() != 9 + 32) {
          return absl::InternalError(
              absl::StrCat("name '", name, "' is not /tpserve-<32 hex digits>"));
        }
        const int fd = shm_open(name.c_str(), O_RDONLY, 0);
        const int open_errno = errno;
        if (fd >= 0) close(fd);
        if (fd >= 0 || open_errno != ENOENT || access(("/dev/shm" + name).c_str(), F_OK) == 0) {
          return absl::InternalError(absl::StrCat(name, " still exists after Create"));
        }
        return CheckAllReduce(**comm, {1000});  // the mapping outlives the name
      }));
}

// World of 3; rank 2 exits after one all-reduce, without a word (and stays an unreaped zombie
// until the parent gets to it). The survivors' next collective must fail with UNAVAILABLE naming
// rank 2 well within the 20 s timeout, and the error must stick.
TEST(ShmCommunicatorTest, DeadPeerIsUnavailableAtOnce) {
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        auto comm = Join(rank, 3, store);
        if (!comm.ok()) return comm.status();
        std::vector<float> data(1 << 22, 1.0f);  // chunked
        if (absl::Status s = (*comm)->AllReduceSum(data.data(), 1000); !s.ok()) return s;
        if (rank == 2) _exit(0);  // no destructor: it dies without leaving the group
        const absl::Time begin = absl::Now();
        const absl::Status first = (*comm)->AllReduceSum(data.data(), 1 << 22);
        const absl::Duration took = absl::Now() - begin;
        const absl::Status again = (*comm)->AllReduceSum(data.data(), 1);
        absl::StatusOr<std::string> sticky =
            CheckStickyFailure(first, again, rank, 3, {absl::StatusCode::kUnavailable});
        if (sticky.ok() && !absl::StrContains(first.message(), "rank 2 (pid")) {
          return absl::InternalError(
              absl::StrCat("does not name the dead rank: ", first.ToString()));
        }
        if (sticky.ok() && took > absl::Seconds(2)) {
          return absl::InternalError(absl::StrCat("noticed after ", absl::FormatDuration(took)));
        }
        return sticky;
      }));
}

// Rank 2 destroys its communicator mid-group but lives on: the others' gather fails with
// UNAVAILABLE at once rather than at their timeout.
TEST(ShmCommunicatorTest, PeerThatLeavesFailsTheOthersAtOnce) {
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        auto comm = Join(rank, 3, store);
        if (!comm.ok()) return comm.status();
        if (rank == 2) {
          comm->reset();
          absl::SleepFor(absl::Seconds(3));
          return "left";
        }
        const absl::Time begin = absl::Now();
        std::vector<float> send(10, 1.0f), recv(30);
        const absl::Status first = (*comm)->GatherToRoot(send.data(), {10, 10, 10}, recv.data());
        const absl::Duration took = absl::Now() - begin;
        return ExpectError(first, absl::StatusCode::kUnavailable, "rank 2 has left the group", took,
                           absl::ZeroDuration(), absl::Seconds(2));
      }));
}

// Rank 2 joins but does not call the collective in time (1 s timeout): the others fail with
// DEADLINE_EXCEEDED naming it, close to the timeout; when rank 2 comes, it finds them gone.
TEST(ShmCommunicatorTest, StalledPeerIsDeadlineExceeded) {
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        auto comm = Join(rank, 3, store, TestOptions(ShmOptions().chunk_bytes, absl::Seconds(1)));
        if (!comm.ok()) return comm.status();
        std::vector<float> data(100, 1.0f);
        if (rank == 2) {
          absl::SleepFor(absl::Seconds(3));
          // The others staged their inputs before giving up, so this one completes; the next
          // cannot.
          (*comm)->AllReduceSum(data.data(), 100).IgnoreError();
          return ExpectError((*comm)->AllReduceSum(data.data(), 100),
                             absl::StatusCode::kUnavailable, "has left the group");
        }
        const absl::Time begin = absl::Now();
        const absl::Status status = (*comm)->AllReduceSum(data.data(), 100);
        const absl::Duration took = absl::Now() - begin;
        return ExpectError(status, absl::StatusCode::kDeadlineExceeded,
                           "rank 2 did not arrive within 1s", took, absl::Seconds(1),
                           absl::Milliseconds(1500));
      }));
}

// A stopped peer looks alive (it holds its lock, it has not left): only Abort, from another
// thread, ends the wait before the 20 s operation timeout, and the others follow.
TEST(ShmCommunicatorTest, AbortEndsAWaitForASilentPeer) {
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        auto comm = Join(rank, 3, store, TestOptions(ShmOptions().chunk_bytes, absl::Seconds(20)));
        if (!comm.ok()) return comm.status();
        return CheckAbandonedWait(**comm, absl::Seconds(6), absl::Milliseconds(500));
      }));
}

// Rank 2 sleeps 2 s before its all-reduce (timeout 10 s): the others wait for it, asleep (well
// under 10% of a core), and the sum is right.
TEST(ShmCommunicatorTest, SlowPeerIsWaitedForWithoutSpinning) {
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        auto comm = Join(rank, 3, store, TestOptions(ShmOptions().chunk_bytes, absl::Seconds(10)));
        if (!comm.ok()) return comm.status();
        if (rank == 2) absl::SleepFor(absl::Seconds(2));
        const double cpu_before = CpuSeconds();
        absl::StatusOr<std::string> checked = CheckAllReduce(**comm, {1000});
        const double cpu = CpuSeconds() - cpu_before;
        if (checked.ok() && rank != 2 && cpu > 0.2) {
          return absl::InternalError(absl::StrCat("waiting 2 s took ", cpu, " s of CPU"));
        }
        return checked;
      }));
}

// Ranks waiting for rank 0's next message with no deadline outlast the 1 s operation timeout,
// asleep, and get the message rank 0 sends after 3 s.
TEST(ShmCommunicatorTest, BroadcastWaitsForRank0WithoutADeadlineOrSpinning) {
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        auto comm = Join(rank, 3, store, TestOptions(ShmOptions().chunk_bytes, absl::Seconds(1)));
        if (!comm.ok()) return comm.status();
        std::string bytes = rank == 0 ? "step 1" : "";
        if (rank == 0) absl::SleepFor(absl::Seconds(3));
        const double cpu_before = CpuSeconds();
        if (absl::Status s = (*comm)->BroadcastBytes(&bytes, /*await_root=*/true); !s.ok()) {
          return s;
        }
        const double cpu = CpuSeconds() - cpu_before;
        if (bytes != "step 1") return absl::InternalError(absl::StrCat("got '", bytes, "'"));
        if (rank != 0 && cpu > 0.2) {
          return absl::InternalError(absl::StrCat("waiting 3 s took ", cpu, " s of CPU"));
        }
        return "ok";
      }));
}

// Rank 0 dies while the others wait for its next message: they fail with UNAVAILABLE naming it
// at once, not never.
TEST(ShmCommunicatorTest, BroadcastWaitEndsWhenRank0Exits) {
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        auto comm = Join(rank, 3, store);
        if (!comm.ok()) return comm.status();
        if (rank == 0) {
          absl::SleepFor(absl::Milliseconds(500));
          _exit(0);  // no destructor: it dies without leaving the group
        }
        std::string bytes;
        const absl::Time begin = absl::Now();
        const absl::Status status = (*comm)->BroadcastBytes(&bytes, /*await_root=*/true);
        return ExpectError(status, absl::StatusCode::kUnavailable, "rank 0 (pid",
                           absl::Now() - begin, absl::Milliseconds(400), absl::Seconds(2));
      }));
}

// Abort from another thread ends a wait for rank 0's next message, and the rank leaves the
// group: it had arrived at the broadcast's barrier, so rank 0's broadcast passes, and the
// collective after it fails.
TEST(ShmCommunicatorTest, AbortEndsAWaitForTheNextBroadcast) {
  ExpectAllPassed(RunRanks(
      AllRanks(2), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        auto comm = Join(rank, 2, store);
        if (!comm.ok()) return comm.status();
        std::string bytes = "step";
        if (rank == 0) {
          absl::SleepFor(absl::Seconds(2));
          (*comm)->BroadcastBytes(&bytes, /*await_root=*/false).IgnoreError();
          float x = 1;
          return ExpectError((*comm)->AllReduceSum(&x, 1), absl::StatusCode::kUnavailable,
                             "rank 1 has left the group");
        }
        std::thread aborter([&] {
          absl::SleepFor(absl::Milliseconds(500));
          (*comm)->Abort("re-forming the group");
        });
        const absl::Time begin = absl::Now();
        const absl::Status status = (*comm)->BroadcastBytes(&bytes, /*await_root=*/true);
        const absl::Duration took = absl::Now() - begin;
        aborter.join();
        return ExpectError(status, absl::StatusCode::kUnavailable, "re-forming the group", took,
                           absl::Milliseconds(400), absl::Seconds(2));
      }));
}

// Rank 2 stalls; rank 0, waiting for it beside rank 1, is aborted: rank 1 fails at once naming
// rank 0, although rank 0 had arrived (it left while waiting, so the group is broken), rather than
// wait for rank 2 until its 20 s timeout.
TEST(ShmCommunicatorTest, RankThatLeavesWhileWaitingFailsTheOthersWaitingBesideIt) {
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        auto comm = Join(rank, 3, store);
        if (!comm.ok()) return comm.status();
        float x = 1;
        if (rank == 2) {
          absl::SleepFor(absl::Seconds(3));
          return "stalled";
        }
        std::thread aborter([&] {
          absl::SleepFor(absl::Milliseconds(300));
          if (rank == 0) (*comm)->Abort("the coordinator gave the step up");
        });
        const absl::Time begin = absl::Now();
        const absl::Status status = (*comm)->AllReduceSum(&x, 1);
        const absl::Duration took = absl::Now() - begin;
        aborter.join();
        if (rank == 0) {
          return ExpectError(status, absl::StatusCode::kUnavailable, "gave the step up");
        }
        return ExpectError(status, absl::StatusCode::kUnavailable, "rank 0 has left the group",
                           took, absl::Milliseconds(250), absl::Seconds(2));
      }));
}

class ShmMissingRankTest : public testing::TestWithParam<int> {};

TEST_P(ShmMissingRankTest, PeersFailWithinConnectTimeout) {
  const int missing = GetParam();
  constexpr absl::Duration kConnectTimeout = absl::Seconds(3);
  const std::vector<int> ranks = AllRanksBut(3, missing);
  ExpectAllPassed(RunRanks(ranks, kConnectTimeout + absl::Seconds(10),
                           [&](int rank, Store store) -> absl::StatusOr<std::string> {
                             ShmOptions options = TestOptions();
                             options.connect_timeout = kConnectTimeout;
                             const absl::Time begin = absl::Now();
                             auto comm = ShmCommunicator::Create(rank, 3, store, options);
                             return CheckMissingPeer(comm.status(), absl::Now() - begin, rank, 3,
                                                     missing, kConnectTimeout);
                           }));
}

INSTANTIATE_TEST_SUITE_P(MissingRank, ShmMissingRankTest, testing::Values(0, 2),
                         [](const auto& info) { return absl::StrCat("rank", info.param); });

// Every rank must get the same FAILED_PRECONDITION, naming the rank that refused and why.
absl::StatusOr<std::string> ExpectRefusal(const absl::Status& status, absl::string_view why) {
  return ExpectError(status, absl::StatusCode::kFailedPrecondition, why);
}

TEST(ShmRefusalTest, RankThatDeclinesSendsEveryRankAway) {
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        ShmOptions options = TestOptions();
        options.decline = rank == 1;
        return ExpectRefusal(ShmCommunicator::Create(rank, 3, store, options).status(),
                             "rank 1: declined shared memory");
      }));
}

TEST(ShmRefusalTest, RankWithADevShmOfItsOwnSendsEveryRankAway) {
  if (absl::Status s = CanGivePrivateDevShm(); !s.ok()) GTEST_SKIP() << s;
  ExpectAllPassed(RunRanks(
      AllRanks(3), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        if (rank == 2) {
          if (absl::Status s = GivePrivateDevShm(); !s.ok()) return s;
        }
        return ExpectRefusal(ShmCommunicator::Create(rank, 3, store, TestOptions()).status(),
                             "rank 2: cannot open /tpserve-");
      }));
}

// Rank 0 cannot reserve the segment (far more than /dev/shm holds): a refusal, not a SIGBUS.
TEST(ShmRefusalTest, SegmentTooLargeForDevShmSendsEveryRankAway) {
  ExpectAllPassed(RunRanks(
      AllRanks(2), kWorldTimeout, [](int rank, Store store) -> absl::StatusOr<std::string> {
        return ExpectRefusal(
            ShmCommunicator::Create(rank, 2, store, TestOptions(int64_t{1} << 42)).status(),
            "rank 0: cannot reserve");
      }));
}

TEST(ShmCommunicatorTest, CreateRejectsBadArguments) {
  ShmOptions zero_timeout;
  zero_timeout.operation_timeout = absl::ZeroDuration();
  ExpectCreateRejectsBadArguments<ShmCommunicator>(zero_timeout);
}

}  // namespace
}  // namespace tpserve::comm_test
