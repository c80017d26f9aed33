// A rank with a /dev/shm of its own, as a pod on a shared Kubernetes node has: it cannot open the
// segments of the others.
#pragma once

#include "absl/status/status.h"

namespace tpserve::comm_test {

// Gives the calling process a new mount namespace with an empty tmpfs on /dev/shm. Needs
// CAP_SYS_ADMIN; call it in a forked rank only.
absl::Status GivePrivateDevShm();

// Whether GivePrivateDevShm works here (tried in a child process), or why not.
absl::Status CanGivePrivateDevShm();

}  // namespace tpserve::comm_test
