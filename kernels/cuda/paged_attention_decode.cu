// The decode half of PagedAttention (the design and its costs: kernels/cuda/paged_attention.h):
// split-KV flash-decoding for batches with at most one query token per sequence, the merge of the
// partitions, and the host-side plan of the split (PlanDecodeSplit, PagedAttentionWorkspaceBytes).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/check.h"
#include "common/cuda_check.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/paged_attention_common.cuh"

namespace tpserve::cuda {
namespace {

using internal::kFullMask;
using internal::kLog2e;
using internal::Unpack8;
using internal::UnpackE4m3x8;

// A lane's 8 values of one cache row: 16 bytes of bf16 or 8 of FP8 codes.
__device__ __forceinline__ void UnpackKv(const uint4& raw, float (&f)[8]) { Unpack8(raw, f); }
__device__ __forceinline__ void UnpackKv(const uint2& raw, float (&f)[8]) { UnpackE4m3x8(raw, f); }

// One warp-group (128 threads) per (partition, KV head, sequence) and per 4 query heads: each
// thread holds q and the running output of up to kDecodeMaxHeadsPerThread heads in registers.
// Group 8 runs two warp-groups in one block, which read the same K/V rows (the second read hits
// L1), rather than one warp-group with twice the registers (226 per thread: 2 blocks per SM, too
// few loads in flight to approach HBM bandwidth).
constexpr int kDecodeThreads = 128;
constexpr int kDecodeMaxHeadsPerThread = 4;
constexpr int kDecodeMaxGroup = 8;  // query heads per block; larger groups take several blocks
constexpr int kMaxPartitionTokens = 512;
constexpr int kMinPartitionTokens = 64;
constexpr int64_t kDecodeMinBlocks = 1024;

// Query heads a decode block covers for `group` query heads per KV head (a padded power of two;
// padding heads are computed and dropped), and how many blocks share the group.
int DecodeBlockHeads(int64_t group) {
  if (group == 1) return 1;
  if (group == 2) return 2;
  if (group <= 4) return 4;
  return kDecodeMaxGroup;
}
int64_t DecodeChunksPerKvHead(int64_t group) {
  return (group + kDecodeMaxGroup - 1) / kDecodeMaxGroup;
}

size_t AlignUp256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The workspace holds three arrays, each at a 256-byte boundary; `entries` is
// num_seqs * num_heads * num_partitions:
//   max: [num_seqs, num_heads, num_partitions]           log2-domain score maximum
//   sum: [num_seqs, num_heads, num_partitions]           sum of exp2(score - max)
//   acc: [num_seqs, num_heads, num_partitions, head_dim]  sum of exp2(score - max) * v
size_t WorkspaceBytesForEntries(int64_t entries, int64_t head_dim) {
  const size_t stats = AlignUp256(static_cast<size_t>(entries) * sizeof(float));
  return 2 * stats + AlignUp256(static_cast<size_t>(entries * head_dim) * sizeof(float));
}

struct DecodeWorkspace {
  float* max = nullptr;
  float* sum = nullptr;
  float* acc = nullptr;
};

// Grid (partition, KV head * chunks, sequence), kSplits warp-groups per block; warp-group `split`
// handles query heads [split * kHeads, (split + 1) * kHeads) of the block's kSplits * kHeads.
// Lane layout in a warp-group: a token row of one KV head is kHeadDim bf16 = kLanesPerRow lanes
// of 8 (16 bytes each, so a row is one coalesced 128- or 256-byte read); the kRows rows take
// tokens row, row + kRows, ... of the partition, kTokensPerLane of them per iteration with all
// loads issued before any is used. Each row keeps its own online-softmax state for its kHeads
// heads in registers (q: kHeads x 8 fp32, acc: the same); the rows are merged through shared
// memory at the end. kFp8: the cache holds E4M3 codes (8 bytes per lane and row), and kv_scale
// joins the score scale and multiplies the output.
template <int kHeadDim, int kHeads, int kSplits, bool kFp8,
          int kThreads = (kSplits * kDecodeThreads)>
__global__ void __launch_bounds__(kThreads)
    DecodeKernel(PagedAttentionParams p, int partition_tokens, int num_partitions,
                 DecodeWorkspace ws) {
  constexpr int kBlockHeads = kHeads * kSplits;
  constexpr int kLanesPerRow = kHeadDim / 8;
  constexpr int kRows = kDecodeThreads / kLanesPerRow;
  constexpr int kTokensPerLane = 4;
  constexpr int kTokensPerIter = kRows * kTokensPerLane;
  using Elem = std::conditional_t<kFp8, uint8_t, bf16>;
  using Raw = std::conditional_t<kFp8, uint2, uint4>;  // one lane's 8 values of a row

  __shared__ int32_t slots[kMaxPartitionTokens];  // [n] cache slot of each partition token
  __shared__ float row_max[kRows][kBlockHeads];
  __shared__ float row_sum[kRows][kBlockHeads];
  __shared__ __align__(16) float row_acc[kRows][kBlockHeads][kHeadDim];

  const int seq = blockIdx.z;
  const int q_token = p.query_start[seq];
  if (p.query_start[seq + 1] == q_token) return;  // no query token this step
  const int context = p.context_lens[seq];
  const int start = blockIdx.x * partition_tokens;
  if (start >= context) return;  // a shorter sequence than the longest: nothing here
  const int n = min(partition_tokens, context - start);
  const bool whole_context = context <= partition_tokens;  // finish here, no merge

  const int group = static_cast<int>(p.num_heads / p.num_kv_heads);
  const int chunks = (group + kBlockHeads - 1) / kBlockHeads;
  const int kv_head = blockIdx.y / chunks;
  const int first_head = kv_head * group + (blockIdx.y % chunks) * kBlockHeads;
  const int heads = min(kBlockHeads, (kv_head + 1) * group - first_head);

  const int bs = static_cast<int>(p.block_size);
  const int32_t* table = p.block_tables + seq * p.max_blocks_per_seq;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int pos = start + i;
    slots[i] = table[pos / bs] * bs + pos % bs;
  }

  const int split = threadIdx.x / kDecodeThreads;
  const int lane = threadIdx.x % kLanesPerRow;
  const int row = threadIdx.x % kDecodeThreads / kLanesPerRow;
  const int my_heads = split * kHeads;  // the first of this thread's heads, in the block
  float q[kHeads][8];
  const float kv_scale = kFp8 ? p.kv_scale : 1.0f;
  const float q_scale = p.scale * kLog2e * kv_scale;
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
    if (my_heads + g < heads) {
      const uint4 raw = *reinterpret_cast<const uint4*>(
          p.q +
          (static_cast<int64_t>(q_token) * p.num_heads + first_head + my_heads + g) * kHeadDim +
          lane * 8);
      Unpack8(raw, q[g]);
#pragma unroll
      for (int j = 0; j < 8; ++j) q[g][j] *= q_scale;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) q[g][j] = 0.0f;  // padding head: computed, never stored
    }
  }

  const int64_t slot_stride = p.num_kv_heads * kHeadDim;  // elements between cache slots
  const Elem* k_cache;
  const Elem* v_cache;
  if constexpr (kFp8) {
    k_cache = p.k_cache_fp8;
    v_cache = p.v_cache_fp8;
  } else {
    k_cache = p.k_cache;
    v_cache = p.v_cache;
  }
  const Elem* k_base = k_cache + kv_head * kHeadDim + lane * 8;
  const Elem* v_base = v_cache + kv_head * kHeadDim + lane * 8;
  float m[kHeads], l[kHeads], acc[kHeads][8];
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[g][j] = 0.0f;
  }
  __syncthreads();  // slots

  // The trip count is the same for the whole block, so every lane reaches the shuffles.
  for (int base = 0; base < n; base += kTokensPerIter) {
    Raw k_raw[kTokensPerLane], v_raw[kTokensPerLane];
    bool valid[kTokensPerLane];
#pragma unroll
    for (int u = 0; u < kTokensPerLane; ++u) {
      const int i = base + u * kRows + row;
      valid[u] = i < n;
      k_raw[u] = v_raw[u] = Raw{};
      if (valid[u]) {
        const int64_t offset = slots[i] * slot_stride;
        k_raw[u] = __ldg(reinterpret_cast<const Raw*>(k_base + offset));
        v_raw[u] = __ldg(reinterpret_cast<const Raw*>(v_base + offset));
      }
    }

    float s[kTokensPerLane][kHeads];
#pragma unroll
    for (int u = 0; u < kTokensPerLane; ++u) {
      float k[8];
      UnpackKv(k_raw[u], k);
#pragma unroll
      for (int g = 0; g < kHeads; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) dot = fmaf(q[g][j], k[j], dot);
        s[u][g] = dot;
      }
    }
    // Sum the partial dots over the kLanesPerRow lanes of each row (aligned lane groups).
#pragma unroll
    for (int u = 0; u < kTokensPerLane; ++u) {
#pragma unroll
      for (int g = 0; g < kHeads; ++g) {
#pragma unroll
        for (int offset = kLanesPerRow / 2; offset > 0; offset /= 2) {
          s[u][g] += __shfl_xor_sync(kFullMask, s[u][g], offset);
        }
      }
    }

#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      float new_max = m[g];
#pragma unroll
      for (int u = 0; u < kTokensPerLane; ++u) {
        if (valid[u]) new_max = fmaxf(new_max, s[u][g]);
      }
      // A row with no token yet keeps max -inf; subtracting 0 instead avoids inf - inf.
      const float ref = new_max == -INFINITY ? 0.0f : new_max;
      const float correction = exp2f(m[g] - ref);
      m[g] = new_max;
      l[g] *= correction;
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[g][j] *= correction;
#pragma unroll
      for (int u = 0; u < kTokensPerLane; ++u) {
        s[u][g] = valid[u] ? exp2f(s[u][g] - ref) : 0.0f;  // the score becomes its weight
        l[g] += s[u][g];
      }
    }
#pragma unroll
    for (int u = 0; u < kTokensPerLane; ++u) {
      float v[8];
      UnpackKv(v_raw[u], v);
#pragma unroll
      for (int g = 0; g < kHeads; ++g) {
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[g][j] = fmaf(s[u][g], v[j], acc[g][j]);
      }
    }
  }

  // Merge the kRows row states. Rows that saw no token have max -inf and weigh exp2(-inf) = 0;
  // row 0 always saw one (n >= 1), so the merged max is finite.
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
    if (lane == 0) {
      row_max[row][my_heads + g] = m[g];
      row_sum[row][my_heads + g] = l[g];
    }
    float4* dst = reinterpret_cast<float4*>(&row_acc[row][my_heads + g][lane * 8]);
    dst[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
    dst[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < heads * kHeadDim; e += kThreads) {
    const int g = e / kHeadDim;
    const int d = e % kHeadDim;
    float max_all = -INFINITY;
#pragma unroll
    for (int r = 0; r < kRows; ++r) max_all = fmaxf(max_all, row_max[r][g]);
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float w = exp2f(row_max[r][g] - max_all);
      sum = fmaf(w, row_sum[r][g], sum);
      o = fmaf(w, row_acc[r][g][d], o);
    }
    o *= kv_scale;  // the partials are linear in V: the merge needs no scale
    const int head = first_head + g;
    if (whole_context) {
      p.out[(static_cast<int64_t>(q_token) * p.num_heads + head) * kHeadDim + d] = ToBf16(o / sum);
    } else {
      const int64_t entry =
          (static_cast<int64_t>(seq) * p.num_heads + head) * num_partitions + blockIdx.x;
      ws.acc[entry * kHeadDim + d] = o;
      if (d == 0) {
        ws.max[entry] = max_all;
        ws.sum[entry] = sum;
      }
    }
  }
}

// Grid (query head, sequence), one thread per output element: merges the partials of sequences
// that DecodeKernel split over more than one partition.
template <int kHeadDim>
__global__ void __launch_bounds__(kHeadDim)
    DecodeMergeKernel(PagedAttentionParams p, int partition_tokens, int num_partitions,
                      DecodeWorkspace ws) {
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int q_token = p.query_start[seq];
  if (p.query_start[seq + 1] == q_token) return;
  const int parts = (p.context_lens[seq] + partition_tokens - 1) / partition_tokens;
  if (parts <= 1) return;  // DecodeKernel wrote the output
  const int64_t first = (static_cast<int64_t>(seq) * p.num_heads + head) * num_partitions;
  float max_all = -INFINITY;
  for (int i = 0; i < parts; ++i) max_all = fmaxf(max_all, ws.max[first + i]);
  float sum = 0.0f, o = 0.0f;
  const int d = threadIdx.x;
  for (int i = 0; i < parts; ++i) {
    const float w = exp2f(ws.max[first + i] - max_all);
    sum = fmaf(w, ws.sum[first + i], sum);
    o = fmaf(w, ws.acc[(first + i) * kHeadDim + d], o);
  }
  p.out[(static_cast<int64_t>(q_token) * p.num_heads + head) * kHeadDim + d] = ToBf16(o / sum);
}

template <int kHeadDim, int kBlockHeads, bool kFp8>
void LaunchDecode(const PagedAttentionParams& p, const DecodeSplit& split, DecodeWorkspace ws,
                  cudaStream_t stream) {
  constexpr int kHeads = std::min(kBlockHeads, kDecodeMaxHeadsPerThread);
  constexpr int kSplits = kBlockHeads / kHeads;
  const int64_t group = p.num_heads / p.num_kv_heads;
  const dim3 grid(split.num_partitions,
                  static_cast<unsigned>(p.num_kv_heads * ((group + kBlockHeads - 1) / kBlockHeads)),
                  static_cast<unsigned>(p.num_seqs));
  DecodeKernel<kHeadDim, kHeads, kSplits, kFp8><<<grid, kDecodeThreads * kSplits, 0, stream>>>(
      p, split.partition_tokens, split.num_partitions, ws);
  CUDA_CHECK(cudaGetLastError());
  if (split.num_partitions > 1) {
    const dim3 merge_grid(static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_seqs));
    DecodeMergeKernel<kHeadDim>
        <<<merge_grid, kHeadDim, 0, stream>>>(p, split.partition_tokens, split.num_partitions, ws);
    CUDA_CHECK(cudaGetLastError());
  }
}

template <int kHeadDim, bool kFp8>
void Decode(const PagedAttentionParams& p, cudaStream_t stream) {
  const DecodeSplit split =
      PlanDecodeSplit(p.num_seqs, p.num_heads, p.num_kv_heads, p.head_dim, p.max_context_len);
  DecodeWorkspace ws;
  if (split.num_partitions > 1) {
    TP_CHECK_MSG(p.workspace != nullptr && p.workspace_bytes >= split.workspace_bytes,
                 "paged attention workspace smaller than PlanDecodeSplit(...).workspace_bytes");
    TP_CHECK(reinterpret_cast<uintptr_t>(p.workspace) % 256 == 0);
    const int64_t entries = p.num_seqs * p.num_heads * split.num_partitions;
    char* base = static_cast<char*>(p.workspace);
    const size_t stats = AlignUp256(static_cast<size_t>(entries) * sizeof(float));
    ws.max = reinterpret_cast<float*>(base);
    ws.sum = reinterpret_cast<float*>(base + stats);
    ws.acc = reinterpret_cast<float*>(base + 2 * stats);
  }
  switch (DecodeBlockHeads(p.num_heads / p.num_kv_heads)) {
    case 1:
      return LaunchDecode<kHeadDim, 1, kFp8>(p, split, ws, stream);
    case 2:
      return LaunchDecode<kHeadDim, 2, kFp8>(p, split, ws, stream);
    case 4:
      return LaunchDecode<kHeadDim, 4, kFp8>(p, split, ws, stream);
    default:
      return LaunchDecode<kHeadDim, kDecodeMaxGroup, kFp8>(p, split, ws, stream);
  }
}

}  // namespace

DecodeSplit PlanDecodeSplit(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads,
                            int64_t head_dim, int64_t max_context_len) {
  TP_CHECK(num_seqs >= 0 && num_heads > 0 && num_kv_heads > 0 && max_context_len >= 0);
  const int64_t blocks_per_partition =
      num_seqs * num_kv_heads * DecodeChunksPerKvHead(num_heads / num_kv_heads);
  const int64_t context = std::max<int64_t>(max_context_len, 1);
  int64_t tokens = kMaxPartitionTokens;
  while (tokens > kMinPartitionTokens &&
         blocks_per_partition * ((context + tokens - 1) / tokens) < kDecodeMinBlocks) {
    tokens /= 2;
  }
  DecodeSplit split;
  split.partition_tokens = static_cast<int32_t>(tokens);
  split.num_partitions = static_cast<int32_t>((context + tokens - 1) / tokens);
  if (split.num_partitions > 1) {
    split.workspace_bytes =
        WorkspaceBytesForEntries(num_seqs * num_heads * split.num_partitions, head_dim);
  }
  return split;
}

size_t PagedAttentionWorkspaceBytes(int64_t max_num_seqs, int64_t num_heads, int64_t num_kv_heads,
                                    int64_t head_dim, int64_t max_context_len) {
  TP_CHECK(max_num_seqs >= 0 && num_heads > 0 && num_kv_heads > 0 && max_context_len >= 0);
  if (max_context_len <= kMinPartitionTokens || max_num_seqs == 0) return 0;  // never split
  // Entries (sequence, head, partition) of any batch within the bounds:
  //  - at 512-token partitions: num_seqs * num_heads * ceil(context / 512), monotone in both;
  //  - at P < 512, PlanDecodeSplit rejected 2P, so num_seqs * kv_blocks * ceil(context / 2P)
  //    < kDecodeMinBlocks, where kv_blocks = num_kv_heads * chunks; ceil(c / P) <=
  //    2 ceil(c / 2P) then bounds the entries by 2 * kDecodeMinBlocks * num_heads / kv_blocks.
  const int64_t kv_blocks = num_kv_heads * DecodeChunksPerKvHead(num_heads / num_kv_heads);
  const int64_t at_largest = max_num_seqs * num_heads *
                             ((max_context_len + kMaxPartitionTokens - 1) / kMaxPartitionTokens);
  const int64_t at_smaller = (2 * kDecodeMinBlocks * num_heads + kv_blocks - 1) / kv_blocks;
  const int64_t at_smallest = max_num_seqs * num_heads *
                              ((max_context_len + kMinPartitionTokens - 1) / kMinPartitionTokens);
  return WorkspaceBytesForEntries(std::min(at_smallest, std::max(at_largest, at_smaller)),
                                  head_dim);
}

namespace internal {

void PagedAttentionDecode(const PagedAttentionParams& p, cudaStream_t stream) {
  const bool fp8 = p.k_cache_fp8 != nullptr;
  if (p.head_dim == 64) return fp8 ? Decode<64, true>(p, stream) : Decode<64, false>(p, stream);
  fp8 ? Decode<128, true>(p, stream) : Decode<128, false>(p, stream);
}

}  // namespace internal

}  // namespace tpserve::cuda
