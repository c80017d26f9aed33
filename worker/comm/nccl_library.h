// NCCL's functions, taken from the library at run time (common/shared_library.h says why). Each
// member is named and typed as the function it holds, so a call reads `nccl.ncclAllReduce(...)`.
#pragma once

#include <nccl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve {

#define TPSERVE_NCCL_FUNCTIONS(X)                                                            \
  X(ncclAllReduce)                                                                           \
  X(ncclCommAbort) X(ncclCommDestroy) X(ncclCommFinalize) X(ncclCommGetAsyncError)           \
      X(ncclCommInitRankConfig) X(ncclGetErrorString) X(ncclGetLastError) X(ncclGetUniqueId) \
          X(ncclGroupEnd) X(ncclGroupStart) X(ncclRecv) X(ncclSend)

struct NcclLibrary {
#define TPSERVE_NCCL_MEMBER(name) decltype(&::name) name = nullptr;
  TPSERVE_NCCL_FUNCTIONS(TPSERVE_NCCL_MEMBER)
#undef TPSERVE_NCCL_MEMBER
};

// Opens libnccl.so.<the NCCL major version built against> (or the file $TPSERVE_NCCL_LIBRARY names)
// at the first call (thread-safe) and returns the same table afterwards; NOT_FOUND naming the
// library, on every call, when it cannot be loaded.
absl::StatusOr<const NcclLibrary*> LoadNccl();

// OK for ncclSuccess; otherwise "<what>: <error string>[: <NCCL's last error text>]" with
// UNAVAILABLE for system and remote (peer) errors, INVALID_ARGUMENT for misuse, INTERNAL for the
// rest (an unhandled CUDA error, an internal NCCL error).
absl::Status NcclStatus(const NcclLibrary& nccl, ncclResult_t result, absl::string_view what);

}  // namespace tpserve
