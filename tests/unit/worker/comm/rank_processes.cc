#include "tests/unit/worker/comm/rank_processes.h"

#include <gloo/rendezvous/file_store.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tpserve::comm_test {
namespace {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/comm_test.XXXXXX");
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

}  // namespace

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

std::vector<int> AllRanksBut(int world_size, int missing) {
  std::vector<int> ranks;
  for (int r = 0; r < world_size; ++r) {
    if (r != missing) ranks.push_back(r);
  }
  return ranks;
}

void ExpectAllPassed(const std::vector<RankResult>& results) {
  for (const RankResult& result : results) {
    EXPECT_TRUE(result.passed) << "rank " << result.rank << ": " << result.message;
  }
}

}  // namespace tpserve::comm_test
