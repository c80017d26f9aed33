#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cub/block/block_reduce.cuh>

#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"
#include "kernels/cuda/token_logprobs.h"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 1024;

struct Ranked {
  float value;
  int32_t id;
};

// True when a comes before b: a larger logit, or the same logit and a lower id.
__device__ __forceinline__ bool Before(const Ranked& a, const Ranked& b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

struct FirstOp {
  __device__ __forceinline__ Ranked operator()(const Ranked& a, const Ranked& b) const {
    return Before(a, b) ? a : b;
  }
};

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

using FloatReduce = cub::BlockReduce<float, kThreads>;
using DoubleReduce = cub::BlockReduce<double, kThreads>;
using RankedReduce = cub::BlockReduce<Ranked, kThreads>;

__global__ void __launch_bounds__(kThreads)
    TokenLogprobsKernel(const float* logits, const int32_t* rows, const int32_t* tokens,
                        float* logprobs, int32_t top, int32_t* top_ids, float* top_logprobs,
                        int32_t num_tokens, int32_t vocab) {
  __shared__ FloatReduce::TempStorage float_temp;
  __shared__ DoubleReduce::TempStorage double_temp;
  __shared__ RankedReduce::TempStorage ranked_temp;
  __shared__ float shared_max;
  __shared__ double shared_sum;
  __shared__ Ranked shared_last;

  const int64_t r = blockIdx.x;
  const int32_t row = rows[r];
  const int32_t token = tokens[r];
  if (row < 0 || row >= num_tokens || token < 0 || token >= vocab) {
    if (threadIdx.x == 0) {
      printf("TokenLogprobs: entry %lld names row %d (of %d) and token %d (of %d)\n",
             static_cast<long long>(r), row, num_tokens, token, vocab);
    }
    __trap();
  }
  const float* x = logits + static_cast<int64_t>(row) * vocab;

  float local_max = -INFINITY;
  for (int32_t i = threadIdx.x; i < vocab; i += kThreads) local_max = fmaxf(local_max, x[i]);
  const float max = FloatReduce(float_temp).Reduce(local_max, MaxOp());
  if (threadIdx.x == 0) shared_max = max;
  __syncthreads();
  const float row_max = shared_max;

  double local_sum = 0.0;
  for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
    local_sum += exp(static_cast<double>(x[i] - row_max));
  }
  const double sum = DoubleReduce(double_temp).Sum(local_sum);
  if (threadIdx.x == 0) shared_sum = sum;
  __syncthreads();
  const float log_sum = row_max + static_cast<float>(log(shared_sum));
  if (threadIdx.x == 0) logprobs[r] = x[token] - log_sum;

  // Top token j is the first, in (descending logit, ascending id) order, after token j - 1.
  Ranked last{INFINITY, -1};  // before every token
  for (int32_t j = 0; j < top; ++j) {
    Ranked best{-INFINITY, INT32_MAX};  // after every token, so any candidate replaces it
    for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
      const Ranked candidate{x[i], i};
      if (Before(last, candidate) && Before(candidate, best)) best = candidate;
    }
    const Ranked chosen = RankedReduce(ranked_temp).Reduce(best, FirstOp());
    if (threadIdx.x == 0) {
      shared_last = chosen;
      top_ids[r * top + j] = chosen.id;
      top_logprobs[r * top + j] = chosen.value - log_sum;
    }
    __syncthreads();
    last = shared_last;
  }
}

}  // namespace

absl::Status TokenLogprobsSupported(const TokenLogprobsParams& p) {
  if (p.num_rows < 0 || p.num_rows > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("TokenLogprobs: num_rows ", p.num_rows, " is outside [0, 2^31 - 1]"));
  }
  if (p.vocab < 1 || p.vocab > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("TokenLogprobs: vocab ", p.vocab, " is outside [1, 2^31 - 1]"));
  }
  const int64_t max_top = p.vocab < kMaxTokenLogprobsTop ? p.vocab : kMaxTokenLogprobsTop;
  if (p.top < 0 || p.top > max_top) {
    return absl::InvalidArgumentError(
        absl::StrCat("TokenLogprobs: top ", p.top, " is outside [0, ", max_top, "]"));
  }
  if (p.num_rows == 0) return absl::OkStatus();
  if (p.num_tokens < 1 || p.num_tokens > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("TokenLogprobs: num_tokens ", p.num_tokens, " is outside [1, 2^31 - 1]"));
  }
  if (p.logits == nullptr || p.rows == nullptr || p.tokens == nullptr || p.logprobs == nullptr ||
      (p.top > 0 && (p.top_ids == nullptr || p.top_logprobs == nullptr))) {
    return absl::InvalidArgumentError("TokenLogprobs: a null device pointer");
  }
  return absl::OkStatus();
}

absl::Status TokenLogprobs(const TokenLogprobsParams& p, cudaStream_t stream) {
  if (absl::Status status = TokenLogprobsSupported(p); !status.ok()) return status;
  if (p.num_rows == 0) return absl::OkStatus();
  TokenLogprobsKernel<<<static_cast<unsigned>(p.num_rows), kThreads, 0, stream>>>(
      p.logits, p.rows, p.tokens, p.logprobs, p.top, p.top_ids, p.top_logprobs,
      static_cast<int32_t>(p.num_tokens), static_cast<int32_t>(p.vocab));
  return CudaStatus(cudaGetLastError(), "TokenLogprobs launch");
}

}  // namespace tpserve::cuda
