// The work list of the decode attention kernel (kernels/cuda/paged_attention.h), planned on the
// host from the batch's real context lengths, so that neither the grid nor the workspace grows
// with the longest context a model allows (as FlashInfer plans its decode): a batch of short
// sequences in a 128k-context model launches what the short sequences need, and a CUDA graph
// captured once per batch size replays every step with that step's list.
//
// Each sequence with exactly one query token this step (a decode row, also inside a batch that
// prefills other sequences: those go through the prefill kernel) is cut into partitions of
// `partition_tokens` context tokens (the last one shorter); an item is one (sequence, partition).
// The partition size is chosen per batch: the smallest multiple of 64 that keeps the items within
// DecodeMaxWorkItems, so that long contexts still spread over >= kDecodeMinBlocks blocks while
// the list stays bounded by the batch size alone. A block covers up to kDecodeMaxGroup query
// heads of one KV head (larger GQA groups take several blocks), so the grid is
// (DecodeMaxWorkItems, num_kv_heads * DecodeChunksPerKvHead); blocks past the list's length exit.
//
// The list, int32 words (DecodeWorkWords of them):
//   [0]                         number of items
//   [1]                         partition_tokens
//   [2, 2 + num_seqs + 1)       item_start: sequence s owns items [item_start[s], item_start[s+1])
//   [3 + num_seqs + 2 i, +2)    item i: its sequence and its partition index in that sequence
// A host-only planner: no CUDA in this header, so its rules are tested anywhere.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"

namespace tpserve::cuda {

inline constexpr int kDecodeMaxGroup = 8;       // query heads per decode block
inline constexpr int kDecodeChunkTokens = 512;  // context tokens a block stages at a time
inline constexpr int kDecodeMinPartition = 64;  // partition_tokens is a multiple of this
inline constexpr int64_t kDecodeMinBlocks = 1024;

// Blocks per KV head: ceil(group / kDecodeMaxGroup).
int64_t DecodeChunksPerKvHead(int64_t num_heads, int64_t num_kv_heads);
// ceil(kDecodeMinBlocks / blocks per item) + num_seqs: every list of a batch of num_seqs fits.
int64_t DecodeMaxWorkItems(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads);
// Words of the list for a batch of num_seqs.
int64_t DecodeWorkWords(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads);
// Offset of item 0's words; the kernels read the list through it too.
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline int64_t
    DecodeWorkItemsOffset(int64_t num_seqs) {
  return 3 + num_seqs;
}

// Fills `out` (DecodeWorkWords words) for a batch with these context lengths (each >= 1) and
// query starts ([num_seqs + 1]; only sequences with one query token get items).
void BuildDecodeWork(absl::Span<const int32_t> context_lens, absl::Span<const int32_t> query_start,
                     int64_t num_heads, int64_t num_kv_heads, int32_t* out);

// The decode's partials in the workspace, three fp32 arrays each at a 256-byte boundary, for the
// DecodeMaxWorkItems(num_seqs) items times num_heads (entry = item * num_heads + head): the
// log2-domain score maxima at offset 0, the sums of exp2(score - max) at sum_offset, and the
// head_dim weighted sums of v at acc_offset; `bytes` in all, whatever the contexts.
struct DecodeWorkspaceLayout {
  size_t sum_offset = 0;
  size_t acc_offset = 0;
  size_t bytes = 0;
};
DecodeWorkspaceLayout DecodeWorkspaceFor(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads,
                                         int64_t head_dim);

// Workspace bytes for any batch of at most `max_num_seqs` sequences: allocate once.
size_t PagedAttentionWorkspaceBytes(int64_t max_num_seqs, int64_t num_heads, int64_t num_kv_heads,
                                    int64_t head_dim);

}  // namespace tpserve::cuda
