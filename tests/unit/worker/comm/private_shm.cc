#include "tests/unit/worker/comm/private_shm.h"

#include <sched.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/unit/worker/comm/rank_processes.h"

namespace tpserve::comm_test {

absl::Status GivePrivateDevShm() {
  if (unshare(CLONE_NEWNS) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("unshare(CLONE_NEWNS): ", strerror(errno)));
  }
  // Without this the new tmpfs would propagate back to the parent's namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      mount("tpserve-test", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
    return absl::FailedPreconditionError(absl::StrCat("mount: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status CanGivePrivateDevShm() {
  const std::vector<RankResult> results =
      RunRanks({0}, absl::Seconds(10), [](int, Store) -> absl::StatusOr<std::string> {
        if (absl::Status s = GivePrivateDevShm(); !s.ok()) return s;
        return std::string("ok");
      });
  if (results.size() == 1 && results[0].passed) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cannot give a process its own /dev/shm (needs CAP_SYS_ADMIN): ",
                   results.empty() ? "no result" : results[0].message));
}

}  // namespace tpserve::comm_test
