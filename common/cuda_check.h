// CUDA and NCCL error handling, for sources built only when CUDA is on (TPSERVE_CUDA).
//
// CUDA_CHECK / NCCL_CHECK: for calls whose failure is a bug in tpserve (a broken invariant): print
// file:line, the expression and the error, then abort. Failures that can happen in a correct
// program (no device, out of memory, a peer that vanished, a bad device id in a request) go
// through CudaStatus / NcclStatus and are returned as absl::Status.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#define CUDA_CHECK(expr)                                                                         \
  do {                                                                                           \
    const cudaError_t tp_cuda_error_ = (expr);                                                   \
    if (tp_cuda_error_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d: CUDA_CHECK failed: %s: %s (%s)\n", __FILE__, __LINE__, #expr, \
                   cudaGetErrorString(tp_cuda_error_), cudaGetErrorName(tp_cuda_error_));        \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

#define NCCL_CHECK(expr)                                                                         \
  do {                                                                                           \
    const ncclResult_t tp_nccl_result_ = (expr);                                                 \
    if (tp_nccl_result_ != ncclSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d: NCCL_CHECK failed: %s: %s (%s)\n", __FILE__, __LINE__, #expr, \
                   ncclGetErrorString(tp_nccl_result_), ncclGetLastError(nullptr));              \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

namespace tpserve {

// OK for cudaSuccess; otherwise "<what>: <error string> (<error name>)" with a code for the
// cause: FAILED_PRECONDITION when there is no usable device or driver, RESOURCE_EXHAUSTED for
// out of memory, INVALID_ARGUMENT for a bad device id or value, INTERNAL for the rest.
inline absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInitializationError:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    case cudaErrorMemoryAllocation:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidValue:
      code = absl::StatusCode::kInvalidArgument;
      break;
    default:
      break;
  }
  return absl::Status(code, absl::StrCat(what, ": ", cudaGetErrorString(error), " (",
                                         cudaGetErrorName(error), ")"));
}

// OK for ncclSuccess; otherwise "<what>: <error string>[: <NCCL's last error text>]" with
// UNAVAILABLE for system and remote (peer) errors, INVALID_ARGUMENT for misuse, INTERNAL for the
// rest (an unhandled CUDA error, an internal NCCL error).
inline absl::Status NcclStatus(ncclResult_t result, absl::string_view what) {
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
  std::string message = absl::StrCat(what, ": ", ncclGetErrorString(result));
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, ": ", last);
  return absl::Status(code, message);
}

}  // namespace tpserve
