// The LoRA products of a step on a CUDA device (bf16 matrices and activations, fp32 sums): the
// batched form of kernels/cpu/lora_product.h, many adapters in one launch. The step's tokens that
// run with an adapter come in groups of at most kLoraGroupTokens tokens of one slot; each group
// reads its adapter's A and Bᵀ once for all its tokens, as the CPU product does (BGMV's shape for
// decode, a segmented product for prefill). The slots' matrices for one module lie at a fixed
// stride in a pool, so a launch serves every slot.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/bf16.h"

namespace tpserve::cuda {

inline constexpr int kLoraGroupTokens = 8;
inline constexpr int64_t kMaxLoraKernelRank = 256;

struct LoraProductParams {
  // [num_groups, 2 + kLoraGroupTokens]: slot (1 and up), token count, token rows.
  const int32_t* groups = nullptr;
  int64_t num_groups = 0;
  // Slot s's A [max_rank, in] at a + (s - 1) * slot_stride, its Bᵀ [max_rank, out] at
  // bt + (s - 1) * slot_stride, and its rank for this module at ranks[(s - 1) * rank_stride]
  // (0: the adapter leaves the module alone). Only the first `rank` rows are read.
  const bf16* a = nullptr;
  const bf16* bt = nullptr;
  int64_t slot_stride = 0;
  const int32_t* ranks = nullptr;
  int64_t rank_stride = 0;
  int64_t max_rank = 0;  // at most kMaxLoraKernelRank
  int64_t in = 0;
  int64_t out = 0;
  const bf16* x = nullptr;  // token t's input row at x + t * x_stride
  int64_t x_stride = 0;
  bf16* y = nullptr;  // token t's output row (the module's first column) at y + t * y_stride
  int64_t y_stride = 0;
  float* scratch = nullptr;  // [num_groups, kLoraGroupTokens, max_rank]: A · x
};

// y[t, j] = bf16(float(y[t, j]) + Σ_k Bᵀ[k, j] · Σ_i A[k, i] · x[t, i]) for every token t of every
// group, with its slot's matrices; queued on `stream`. Each (t, j) is written by one thread, so
// the groups must not share a token.
void LoraProduct(const LoraProductParams& p, cudaStream_t stream);

}  // namespace tpserve::cuda
