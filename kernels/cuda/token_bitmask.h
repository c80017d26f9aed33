// Allow-list bitmasks over logits rows (CUDA): the device twin of ApplyBitmask in
// worker/logits_processor.h. A mask row is packed, BitmaskWords(vocab) = ceil(vocab / 32) words:
// token t is allowed when bit t % 32 of word t / 32 is set. Bits past the vocabulary are ignored.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace tpserve::cuda {

// logits[r, t] = -inf for every token t that mask row r does not allow; the rest unchanged.
struct ApplyTokenBitmaskParams {
  float* logits = nullptr;         // [num_rows, vocab], device, in place
  const uint32_t* mask = nullptr;  // [num_rows, ceil(vocab / 32)], device
  int64_t num_rows = 0;
  int64_t vocab = 0;
};

// OK, or INVALID_ARGUMENT naming the problem: num_rows outside [0, 65535], vocab outside
// [1, 2^31 - 1], a null pointer where num_rows > 0.
absl::Status ApplyTokenBitmaskSupported(const ApplyTokenBitmaskParams& params);

// Enqueues one kernel on `stream` (none for num_rows == 0) and returns the Supported error, the
// launch error, or OK. Cost: one read and at most one write of each logit, one word read per 32.
absl::Status ApplyTokenBitmask(const ApplyTokenBitmaskParams& params, cudaStream_t stream);

}  // namespace tpserve::cuda
