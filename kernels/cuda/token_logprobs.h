// Log-probabilities of chosen tokens, and the most likely tokens, from raw logits rows (CUDA): the
// device twin of worker/logits_processor.cc's AppendLogprobs. Per row:
//   log_sum = max + float(log(sum_t exp(double(logit_t - max))))
//   logprob = logit[token] - log_sum
//   top: the `top` largest logits, by descending logit and then ascending id, each - log_sum.
// Differences from the CPU: the double sum is added in another order (its rounding, ~1e-16
// relative, is far below float's), and NaN logits are ignored by the maximum (the model's logits
// are finite; -inf is fine).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace tpserve::cuda {

inline constexpr int32_t kMaxTokenLogprobsTop = 20;

struct TokenLogprobsParams {
  const float* logits = nullptr;  // [num_tokens, vocab], device
  const int32_t* rows = nullptr;  // [num_rows] rows of logits, each in [0, num_tokens), device
  const int32_t* tokens =
      nullptr;                    // [num_rows] the chosen token of each row, in [0, vocab), device
  float* logprobs = nullptr;      // [num_rows], device
  int32_t top = 0;                // most likely tokens per row, [0, min(vocab, 20)]
  int32_t* top_ids = nullptr;     // [num_rows, top], device; most likely first (with top > 0)
  float* top_logprobs = nullptr;  // [num_rows, top], device (with top > 0)
  int64_t num_tokens = 0;
  int64_t num_rows = 0;
  int64_t vocab = 0;
};

// OK, or INVALID_ARGUMENT naming the problem: num_rows outside [0, 2^31 - 1], vocab outside
// [1, 2^31 - 1], num_tokens outside [1, 2^31 - 1] (with rows to do), top outside
// [0, min(vocab, 20)], a null pointer that the call needs. A row or token outside its range
// traps the kernel: it is the worker's bug, not a client's.
absl::Status TokenLogprobsSupported(const TokenLogprobsParams& params);

// Enqueues one kernel on `stream` (none for num_rows == 0) and returns the Supported error, the
// launch error, or OK. Cost per row: one block; a pass over the row for the maximum, one for the
// sum (a double exp per logit), and one per top token (so up to 22 passes, from L2 for a row of a
// few hundred KiB).
absl::Status TokenLogprobs(const TokenLogprobsParams& params, cudaStream_t stream);

}  // namespace tpserve::cuda
