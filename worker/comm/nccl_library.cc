#include "worker/comm/nccl_library.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/shared_library.h"

namespace tpserve {
namespace {

absl::StatusOr<NcclLibrary> Open() {
  // The soname carries the major version: another major is another ABI.
  const std::string name = absl::StrCat("libnccl.so.", NCCL_MAJOR);
  absl::StatusOr<SharedLibrary> library =
      SharedLibrary::Open("NCCL", "TPSERVE_NCCL_LIBRARY", {name.c_str()});
  if (!library.ok()) return library.status();
  NcclLibrary table;
  absl::Status status;
#define TPSERVE_NCCL_BIND(function) \
  if (status.ok()) status = library->Bind(#function, &table.function);
  TPSERVE_NCCL_FUNCTIONS(TPSERVE_NCCL_BIND)
#undef TPSERVE_NCCL_BIND
  if (!status.ok()) return status;
  return table;
}

}  // namespace

absl::StatusOr<const NcclLibrary*> LoadNccl() {
  static const absl::StatusOr<NcclLibrary>* const loaded = new absl::StatusOr<NcclLibrary>(Open());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

absl::Status NcclStatus(const NcclLibrary& nccl, ncclResult_t result, absl::string_view what) {
  if (result == ncclSuccess) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
    case ncclInProgress:
      code = absl::StatusCode::kUnavailable;
      break;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      code = absl::StatusCode::kInvalidArgument;
      break;
    default:
      break;
  }
  std::string message = absl::StrCat(what, ": ", nccl.ncclGetErrorString(result));
  const char* last = nccl.ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, ": ", last);
  return absl::Status(code, message);
}

}  // namespace tpserve
