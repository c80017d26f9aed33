// GlooCommunicator across real processes: the test forks one child per rank; the children meet
// through a FileStore in a fresh temp directory and talk TCP over 127.0.0.1. The parent never
// creates Gloo objects (a fork must not copy Gloo's I/O threads), waits for the children with a
// deadline, kills them all if one hangs, and reports each failing child's message.
#include "worker/comm/gloo_communicator.h"

#include <gloo/rendezvous/file_store.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/gloo_test.XXXXXX");
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }  // Empty if mkdtemp failed.

 private:
  std::string path_;
};

// What a child returns: OK with a note for the log, or the reason it failed.
using RankBody = std::function<absl::StatusOr<std::string>(int rank)>;

struct RankResult {
  int rank = -1;
  bool passed = false;
  std::string message;  // The child's note or error, or how it died.
};

// Owns forked rank processes: the destructor SIGKILLs and reaps any still running, so no test
// outcome (failed assertion, exception) leaves a process behind.
class RankProcesses {
 public:
  RankProcesses() = default;
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;
  ~RankProcesses() {
    for (Child& child : children_) {
      if (child.pid > 0) {
        kill(child.pid, SIGKILL);
        waitpid(child.pid, nullptr, 0);
      }
      if (child.pipe_fd >= 0) close(child.pipe_fd);
    }
  }

  // Forks a child that runs `body(rank)`, writes its message to a pipe and _exits (0 on success).
  void Spawn(int rank, const RankBody& body) {
    int fds[2];
    if (pipe(fds) != 0) {
      ADD_FAILURE() << "pipe: " << strerror(errno);
      return;
    }
    fflush(nullptr);  // Do not let the child flush the parent's buffered output again.
    const pid_t pid = fork();
    if (pid < 0) {
      ADD_FAILURE() << "fork: " << strerror(errno);
      close(fds[0]);
      close(fds[1]);
      return;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // Die with the test binary, whatever kills it.
      close(fds[0]);
      const absl::StatusOr<std::string> result = body(rank);
      const std::string message = result.ok() ? *result : result.status().ToString();
      if (write(fds[1], message.data(), message.size()) < 0) _exit(3);
      _exit(result.ok() ? 0 : 1);
    }
    close(fds[1]);
    children_.push_back(Child{rank, pid, fds[0]});
  }

  // Waits until every child has exited or `timeout` has passed; then kills the rest.
  std::vector<RankResult> WaitAll(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    std::vector<RankResult> results;
    for (Child& child : children_) {
      RankResult result{child.rank, false, ""};
      int status = 0;
      pid_t done = 0;
      while ((done = waitpid(child.pid, &status, WNOHANG)) == 0 && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      if (done == 0) {
        kill(child.pid, SIGKILL);
        waitpid(child.pid, nullptr, 0);
        result.message =
            absl::StrCat("did not finish within ", absl::FormatDuration(timeout), "; killed");
      } else if (WIFEXITED(status)) {
        result.passed = WEXITSTATUS(status) == 0;
        result.message = ReadAll(child.pipe_fd);
        if (!result.passed && result.message.empty()) {
          result.message = absl::StrCat("exited with status ", WEXITSTATUS(status));
        }
      } else {
        result.message = absl::StrCat("killed by signal ", WTERMSIG(status));
      }
      child.pid = -1;
      close(child.pipe_fd);
      child.pipe_fd = -1;
      results.push_back(std::move(result));
    }
    return results;
  }

 private:
  struct Child {
    int rank;
    pid_t pid;
    int pipe_fd;  // Read end of the child's message pipe.
  };

  static std::string ReadAll(int fd) {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
    return out;
  }

  std::vector<Child> children_;
};

using Store = std::shared_ptr<gloo::rendezvous::Store>;

// Runs `body` in one process for each of `ranks`, all sharing a FileStore in a fresh directory
// (removed afterwards); `body` receives the rank and the store.
using WorldBody = std::function<absl::StatusOr<std::string>(int rank, Store store)>;

std::vector<RankResult> RunRanks(const std::vector<int>& ranks, absl::Duration timeout,
                                 const WorldBody& body) {
  ScopedTempDir dir;
  if (dir.path().empty()) {
    ADD_FAILURE() << "mkdtemp failed: " << strerror(errno);
    return {};
  }
  RankProcesses processes;
  for (const int rank : ranks) {
    processes.Spawn(rank, [&](int r) {
      return body(r, std::make_shared<gloo::rendezvous::FileStore>(dir.path()));
    });
  }
  return processes.WaitAll(timeout);
}

std::vector<int> AllRanks(int world_size) {
  std::vector<int> ranks(world_size);
  for (int r = 0; r < world_size; ++r) ranks[r] = r;
  return ranks;
}

void ExpectAllPassed(const std::vector<RankResult>& results) {
  for (const RankResult& result : results) {
    EXPECT_TRUE(result.passed) << "rank " << result.rank << ": " << result.message;
  }
}

GlooOptions TestOptions() {
  GlooOptions options;
  options.host = "127.0.0.1";
  options.connect_timeout = absl::Seconds(20);
  options.operation_timeout = absl::Seconds(20);
  return options;
}

constexpr absl::Duration kWorldTimeout = absl::Seconds(60);

// Each *Rank function below is one rank's side of a scenario, run in its own process.

// All-reduces 1, 1000 and 2^20 floats of small integers: every partial sum is exact in float,
// so the result must equal the sum computed here exactly.
absl::StatusOr<std::string> AllReduceRank(int world_size, int rank, Store store) {
  auto comm = GlooCommunicator::Create(rank, world_size, store, TestOptions());
  if (!comm.ok()) return comm.status();
  if ((*comm)->rank() != rank || (*comm)->world_size() != world_size) {
    return absl::InternalError("rank() or world_size() is wrong");
  }
  for (const int64_t count : {int64_t{1}, int64_t{1000}, int64_t{1} << 20}) {
    std::vector<float> data(count);
    for (int64_t i = 0; i < count; ++i) data[i] = (rank + 1) * 1000 + i % 1000;
    if (absl::Status s = (*comm)->AllReduceSum(data.data(), count); !s.ok()) return s;
    for (int64_t i = 0; i < count; ++i) {
      const float want = 1000 * world_size * (world_size + 1) / 2 + world_size * (i % 1000);
      if (data[i] != want) {
        return absl::InternalError(
            absl::StrCat("count ", count, ": element ", i, " is ", data[i], ", want ", want));
      }
    }
  }
  return std::string("ok");
}

// Gathers `counts[r]` floats from each rank r, twice with different data (consecutive gathers
// must not mix); rank 0 checks the concatenation.
absl::StatusOr<std::string> GatherRank(const std::vector<int64_t>& counts, int rank, Store store) {
  const int world_size = static_cast<int>(counts.size());
  auto comm = GlooCommunicator::Create(rank, world_size, store, TestOptions());
  if (!comm.ok()) return comm.status();
  for (int round = 0; round < 2; ++round) {
    std::vector<float> send(counts[rank]);
    for (int64_t j = 0; j < counts[rank]; ++j) send[j] = round * 1000 + rank * 100 + j;
    std::vector<float> want;  // Rank 0's expected result.
    for (int r = 0; r < world_size; ++r) {
      for (int64_t j = 0; j < counts[r]; ++j) want.push_back(round * 1000 + r * 100 + j);
    }
    std::vector<float> recv(rank == 0 ? want.size() : 0);
    absl::Status s = (*comm)->GatherToRoot(send.data(), counts, rank == 0 ? recv.data() : nullptr);
    if (!s.ok()) return s;
    if (rank == 0 && recv != want) {
      return absl::InternalError(absl::StrCat("round ", round, ": got [", absl::StrJoin(recv, ", "),
                                              "], want [", absl::StrJoin(want, ", "), "]"));
    }
  }
  return std::string("ok");
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
  const absl::Duration took = absl::Now() - begin;
  if (comm.ok()) return absl::InternalError("Create succeeded without all ranks");
  const std::string message(comm.status().message());
  if (comm.status().code() != absl::StatusCode::kDeadlineExceeded ||
      !absl::StrContains(message, absl::StrCat("rank ", rank, " of 3")) ||
      !absl::StrContains(message, absl::StrCat("rank ", missing))) {
    return absl::InternalError(absl::StrCat("want DEADLINE_EXCEEDED naming rank ", rank,
                                            " and missing rank ", missing, "; got ",
                                            comm.status().ToString()));
  }
  if (took > connect_timeout + absl::Seconds(2)) {
    return absl::InternalError(absl::StrCat("gave up after ", absl::FormatDuration(took)));
  }
  return absl::StrCat("after ", absl::FormatDuration(took), ": ", comm.status().ToString());
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
  if (first.ok() || again != first ||
      (first.code() != absl::StatusCode::kUnavailable &&
       first.code() != absl::StatusCode::kDeadlineExceeded) ||
      !absl::StrContains(first.message(), absl::StrCat("rank ", rank, " of 3"))) {
    return absl::InternalError(
        absl::StrCat("want a sticky UNAVAILABLE or DEADLINE_EXCEEDED naming "
                     "this rank; got ",
                     first.ToString(), " then ", again.ToString()));
  }
  return first.ToString();
}

class GlooWorldTest : public testing::TestWithParam<int> {};

TEST_P(GlooWorldTest, AllReduceSumIsExact) {
  const int world_size = GetParam();
  ExpectAllPassed(RunRanks(AllRanks(world_size), kWorldTimeout, [&](int rank, Store store) {
    return AllReduceRank(world_size, rank, store);
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
  std::vector<int> ranks;
  for (int r = 0; r < 3; ++r) {
    if (r != missing) ranks.push_back(r);
  }
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

TEST(GlooCommunicatorTest, CreateRejectsBadArguments) {
  auto store = std::make_shared<gloo::rendezvous::FileStore>("/tmp");
  EXPECT_EQ(GlooCommunicator::Create(3, 3, store, GlooOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GlooCommunicator::Create(0, 0, store, GlooOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GlooCommunicator::Create(0, 2, nullptr, GlooOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
  GlooOptions zero_timeout;
  zero_timeout.connect_timeout = absl::ZeroDuration();
  EXPECT_EQ(GlooCommunicator::Create(0, 2, store, zero_timeout).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
