#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"
#include "kernels/cuda/token_bitmask.h"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxRows = 65535;  // gridDim.y

// Block (x, r) covers tokens [x * kThreads, (x + 1) * kThreads) of row r.
__global__ void ApplyTokenBitmaskKernel(float* logits, const uint32_t* mask, int64_t vocab,
                                        int64_t words) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= vocab) return;
  const int64_t row = blockIdx.y;
  const uint32_t word = mask[row * words + t / 32];
  if (((word >> (t % 32)) & 1u) == 0) logits[row * vocab + t] = -INFINITY;
}

}  // namespace

absl::Status ApplyTokenBitmaskSupported(const ApplyTokenBitmaskParams& p) {
  if (p.num_rows < 0 || p.num_rows > kMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat("ApplyTokenBitmask: num_rows ", p.num_rows,
                                                   " is outside [0, ", kMaxRows, "]"));
  }
  if (p.vocab < 1 || p.vocab > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("ApplyTokenBitmask: vocab ", p.vocab, " is outside [1, 2^31 - 1]"));
  }
  if (p.num_rows > 0 && (p.logits == nullptr || p.mask == nullptr)) {
    return absl::InvalidArgumentError("ApplyTokenBitmask: a null device pointer");
  }
  return absl::OkStatus();
}

absl::Status ApplyTokenBitmask(const ApplyTokenBitmaskParams& p, cudaStream_t stream) {
  if (absl::Status status = ApplyTokenBitmaskSupported(p); !status.ok()) return status;
  if (p.num_rows == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>((p.vocab + kThreads - 1) / kThreads),
                  static_cast<unsigned>(p.num_rows));
  ApplyTokenBitmaskKernel<<<grid, kThreads, 0, stream>>>(p.logits, p.mask, p.vocab,
                                                         (p.vocab + 31) / 32);
  return CudaStatus(cudaGetLastError(), "ApplyTokenBitmask launch");
}

}  // namespace tpserve::cuda
