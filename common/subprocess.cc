#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tpserve {

absl::StatusOr<Subprocess> Subprocess::Start(const std::vector<std::string>& argv,
                                             const std::string& output_path) {
  if (argv.empty()) return absl::InvalidArgumentError("Subprocess::Start: empty argv");
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  // Everything the child needs is prepared here: after fork() in a threaded process the child may
  // only make async-signal-safe calls (no allocation) until exec.
  const std::string exec_failed = absl::StrCat("exec ", argv[0], " failed\n");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    if (!output_path.empty()) {
      const int fd = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) _exit(126);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    execv(args[0], args.data());
    (void)!write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    _exit(127);
  }
  return Subprocess(pid);
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(other.pid_), exit_status_(other.exit_status_) {
  other.pid_ = -1;
}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (running()) Stop(absl::ZeroDuration());
    pid_ = other.pid_;
    exit_status_ = other.exit_status_;
    other.pid_ = -1;
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (running()) Stop(absl::Seconds(2));
}

std::optional<int> Subprocess::Poll() {
  if (pid_ <= 0 || exit_status_.has_value()) return exit_status_;
  int status = 0;
  const pid_t done = waitpid(pid_, &status, WNOHANG);
  if (done == pid_) exit_status_ = status;
  // Reaped elsewhere (or SIGCHLD ignored): the child is gone, its status unknown.
  if (done < 0 && errno == ECHILD) exit_status_ = 0;
  return exit_status_;
}

std::optional<int> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (Poll().has_value()) return exit_status_;
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void Subprocess::Signal(int signal) {
  if (running()) kill(pid_, signal);
}

int Subprocess::Stop(absl::Duration grace) {
  if (pid_ <= 0) return 0;
  Signal(SIGTERM);
  if (!Wait(grace).has_value()) {
    Signal(SIGKILL);
    while (!Poll().has_value()) absl::SleepFor(absl::Milliseconds(5));
  }
  return *exit_status_;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("ended with wait status ", status);
}

}  // namespace tpserve
