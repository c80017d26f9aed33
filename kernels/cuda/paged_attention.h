// Causal grouped-query attention over the paged KV cache (bf16 in and out, fp32 statistics and
// accumulation, CUDA). Same semantics as kernels/cpu/paged_attention.h; read that header for the
// cache layout and for what query_start and context_lens mean.
//
// Two kernels behind one dispatcher:
//  - Decode (every sequence has at most one query token): split-KV flash-decoding over a work
//    list planned on the host from the batch's real context lengths (kernels/cuda/decode_work.h:
//    the grid and workspace depend on the batch size only, not on the longest context a model
//    allows). A block per (work item = a partition of one sequence's context, KV head) covers all
//    the query heads of that KV head (up to 8; larger groups take several blocks), staging 512
//    slots at a time, so each K/V row is read from HBM once per GQA group:
//    one warp-group (128 threads) per 4 query heads, reading token rows with 16-byte loads (one
//    row of one head = head_dim * 2 contiguous bytes, read by head_dim / 8 lanes), four rows per
//    lane in flight. Registers: 128 per thread at group 4 and 8, so 16 warps and ~64 KB of loads
//    in flight per SM. Each block writes a partial (max, sum, unnormalized output) per query head
//    to the workspace; a second kernel merges the partitions. A sequence whose context fits in
//    one item is finished by the first kernel and skipped by the second.
//    Bytes moved per (sequence, KV head): 4 * context * head_dim (K and V, bf16, once) plus
//    8 * group * num_partitions * (head_dim + 2) of fp32 partials (written, then read). For
//    batch 64 at 2k context with Llama-3-8B shapes (32 heads, 8 KV heads, head_dim 128:
//    1,024-token partitions, 1,024 blocks) that is 537 MB of K/V (64 * 8 * 4 * 2048 * 128 bytes)
//    and 4.3 MB of partials per layer: 114 us at the H200's 4.8 TB/s, so the 70% target is
//    <= 163 us.
//    The arithmetic runs on CUDA cores: group / 2 FMAs per K/V byte (plus the cross-lane sums of
//    the dot products), which leaves the kernel memory-bound up to group 4 and close to the
//    issue limit at group 8 (4 FMA/byte at 4.8 TB/s is 57% of the H200's fp32 FMA rate), where
//    a tensor-core decode is the next step.
//  - Prefill (the sequences of more than one query token; in a mixed batch the decode rows go
//    through the decode kernel, which the dispatcher runs after it): FlashAttention-2 tiling on
//    tensor cores through WMMA (bf16 x bf16 -> fp32, 16x16x16). A block of 4 warps per (64 query
//    tokens, query head, sequence); 64-key K/V tiles gathered through the block table into shared
//    memory with cp.async (the next K tile loads during softmax and P.V, the next V tile during
//    the next Q.K^T); online softmax in fp32 with the running output kept in shared memory.
//    The softmax weights are rounded to bf16 for the P.V product (as FlashAttention does); the
//    normalizer sums the fp32 weights. A first version: the running output makes a shared-memory
//    round trip per tile (WMMA accumulators have no documented element layout to rescale in
//    registers), fragments load without ldmatrix, 110 KB of shared memory at head_dim 128 allows
//    1 block per SM on A100 and 2 on H100/H200, and the query heads of a KV group each gather the
//    K/V tiles (from L2 after the first). Expect well below FlashAttention-2 speed.
//
// FP8 E4M3 caches (k_cache_fp8, v_cache_fp8): both kernels decode the codes in registers (the
// decode kernel reads 8 bytes per lane per row instead of 16; the prefill kernel converts each
// tile to bf16 on its way into shared memory, exactly, with plain loads instead of cp.async) and
// apply the KV head's k_scales entry to the scores and its v_scales entry to the output.
//
// Supported: head_dim 64 and 128 (PagedAttentionSupported), any group size (groups over 8 are
// processed 8 query heads per decode block), any block_size >= 1.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/decode_work.h"

namespace tpserve::cuda {

struct PagedAttentionParams {
  // Device pointers (layout and contracts as in cpu::PagedAttentionParams).
  const bf16* q = nullptr;        // [num_tokens, num_heads, head_dim]
  const bf16* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  const bf16* v_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  // Or an FP8 cache (k_cache and v_cache null), laid out the same, holding E4M3 codes of KV head
  // g's values / k_scales[g] (of V: v_scales[g]) (SplitQkvRopeWriteKv); 8-byte aligned. The
  // kernels read half the bytes.
  const uint8_t* k_cache_fp8 = nullptr;
  const uint8_t* v_cache_fp8 = nullptr;
  const float* k_scales = nullptr;        // [num_kv_heads], with an FP8 cache
  const float* v_scales = nullptr;        // [num_kv_heads], with an FP8 cache
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs], including this step's tokens
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  bf16* out = nullptr;                    // [num_tokens, num_heads, head_dim]; no overlap

  // Host copies of facts about the device arrays above: they size the grids, so they must be
  // known without a device-to-host copy. Each must be exact or an upper bound as stated.
  int64_t num_tokens = 0;       // == query_start[num_seqs]
  int32_t max_query_len = 0;    // >= every query_start[s + 1] - query_start[s]
  int32_t max_context_len = 0;  // >= every context_lens[s]

  int64_t num_seqs = 0;
  int64_t max_blocks_per_seq = 0;
  int64_t num_heads = 0;     // query heads on this rank
  int64_t num_kv_heads = 0;  // num_heads % num_kv_heads == 0
  int64_t head_dim = 0;      // 64 or 128
  int64_t block_size = 0;    // tokens per cache block; num_blocks * block_size < 2^31
  float scale = 0.0f;        // softmax scale, normally 1 / sqrt(head_dim)

  // The batch's work list for its decode rows (BuildDecodeWork, kernels/cuda/decode_work.h),
  // device, always; and scratch for their partials, at least PagedAttentionWorkspaceBytes(
  // num_seqs, ...), 256-byte aligned (as cudaMalloc returns), used only by the launch it is
  // passed to, in stream order.
  const int32_t* decode_work = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// OK when PagedAttention handles these shapes; INVALID_ARGUMENT naming the value otherwise
// (head_dim other than 64 or 128, num_heads not a multiple of num_kv_heads, non-positive sizes).
// Check at model load, before any step.
absl::Status PagedAttentionSupported(int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                                     int64_t block_size);

// out[t, h, :] = softmax(scale * q[t, h] . K[0..pos(t), g]) V[0..pos(t), g], g = h / group,
// queued on `stream`. Runs the prefill kernel for the sequences of several query tokens (when
// max_query_len > 1) and the decode kernels for those of one. Shapes must have passed
// PagedAttentionSupported and the workspace must be large enough; anything else is a bug and aborts
// with file:line. Device-side contract violations (context_len > max_context_len, a query longer
// than its context) are not checked.
void PagedAttention(const PagedAttentionParams& p, cudaStream_t stream);

}  // namespace tpserve::cuda
