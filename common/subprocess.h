// RAII owner of a child process. The child gets SIGTERM if this process dies (PR_SET_PDEATHSIG),
// so a killed launcher or test never leaves workers behind; the destructor kills and reaps it.
// PR_SET_PDEATHSIG follows the thread that forked: call Start from a thread that lives as long
// as the child (the main thread, or the thread that owns the Subprocess).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tpserve {

class Subprocess {
 public:
  // Starts argv[0] (a path) with `argv`. stdout/stderr are inherited unless `output_path` is
  // given, in which case both go to that file (created or truncated).
  static absl::StatusOr<Subprocess> Start(const std::vector<std::string>& argv,
                                          const std::string& output_path = "");

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !exit_status_.has_value(); }

  // Non-blocking: the raw wait status once the child has exited, nullopt while it runs.
  std::optional<int> Poll();
  // Waits up to `timeout`; the wait status, or nullopt if it is still running.
  std::optional<int> Wait(absl::Duration timeout);
  void Signal(int signal);
  // SIGTERM, then SIGKILL after `grace`; returns the wait status.
  int Stop(absl::Duration grace = absl::Seconds(5));

 private:
  explicit Subprocess(pid_t pid) : pid_(pid) {}

  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

// "exited with status 1" / "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int status);

}  // namespace tpserve
