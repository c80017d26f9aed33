// CUDA error handling, for sources built only when CUDA is on (TPSERVE_CUDA). NCCL's is in
// worker/comm/nccl_library.h.
//
// CUDA_CHECK: for calls whose failure is a bug in tpserve (a broken invariant): print
// file:line, the expression and the error, then abort. Failures that can happen in a correct
// program (no device, out of memory, a peer that vanished, a bad device id in a request) go
// through CudaStatus and are returned as absl::Status.
#pragma once

#include <cuda_runtime_api.h>

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

}  // namespace tpserve
