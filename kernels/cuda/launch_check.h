// The check after a kernel launch, for the .cu files of kernels/cuda/.
//
// It does what CUDA_CHECK(cudaGetLastError()) from common/cuda_check.h does, without that header's
// Abseil and NCCL includes: nvcc parses every translation unit once for the host and once per
// architecture, and absl/status + absl/strings took 4.4 s of a 6.5 s compile (two archs).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

// A launch that fails (a bad configuration, no kernel image for the device) is a bug in
// tpserve: print file:line and the error, then abort. Errors of earlier asynchronous work that
// are reported here abort as well; they are equally fatal.
#define TP_CUDA_CHECK_LAUNCH()                                                                \
  do {                                                                                        \
    const cudaError_t tp_launch_error_ = cudaGetLastError();                                  \
    if (tp_launch_error_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s:%d: kernel launch failed: %s (%s)\n", __FILE__, __LINE__,      \
                   cudaGetErrorString(tp_launch_error_), cudaGetErrorName(tp_launch_error_)); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)
