// The decode half of PagedAttention (the design and its costs: kernels/cuda/paged_attention.h):
// split-KV flash-decoding for batches with at most one query token per sequence over the work
// list of kernels/cuda/decode_work.h, and the merge of the partitions.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/check.h"
#include "common/cuda_check.h"
#include "kernels/cuda/decode_work.h"
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

// Query heads a decode block covers for `group` query heads per KV head (a padded power of two;
// padding heads are computed and dropped), and how many blocks share the group.
int DecodeBlockHeads(int64_t group) {
  if (group == 1) return 1;
  if (group == 2) return 2;
  if (group <= 4) return 4;
  return kDecodeMaxGroup;
}
// The partials' arrays (DecodeWorkspaceFor).
struct DecodeWorkspace {
  float* max = nullptr;
  float* sum = nullptr;
  float* acc = nullptr;
};

// Grid (work item, KV head * chunks), kSplits warp-groups per block; warp-group `split`
// handles query heads [split * kHeads, (split + 1) * kHeads) of the block's kSplits * kHeads.
// The item's partition is staged kDecodeChunkTokens slots at a time; the online-softmax state
// carries across the chunks in registers.
// Lane layout in a warp-group: a token row of one KV head is kHeadDim bf16 = kLanesPerRow lanes
// of 8 (16 bytes each, so a row is one coalesced 128- or 256-byte read); the kRows rows take
// tokens row, row + kRows, ... of the partition, kTokensPerLane of them per iteration with all
// loads issued before any is used. Each row keeps its own online-softmax state for its kHeads
// heads in registers (q: kHeads x 8 fp32, acc: the same); the rows are merged through shared
// memory at the end. kFp8: the cache holds E4M3 codes (8 bytes per lane and row); the KV head's
// K scale joins the score scale and its V scale multiplies the output.
template <int kHeadDim, int kHeads, int kSplits, bool kFp8,
          int kThreads = (kSplits * kDecodeThreads)>
__global__ void __launch_bounds__(kThreads)
    DecodeKernel(PagedAttentionParams p, DecodeWorkspace ws) {
  constexpr int kBlockHeads = kHeads * kSplits;
  constexpr int kLanesPerRow = kHeadDim / 8;
  constexpr int kRows = kDecodeThreads / kLanesPerRow;
  constexpr int kTokensPerLane = 4;
  constexpr int kTokensPerIter = kRows * kTokensPerLane;
  using Elem = std::conditional_t<kFp8, uint8_t, bf16>;
  using Raw = std::conditional_t<kFp8, uint2, uint4>;  // one lane's 8 values of a row

  __shared__ int32_t slots[kDecodeChunkTokens];  // cache slot of each token of the chunk
  __shared__ float row_max[kRows][kBlockHeads];
  __shared__ float row_sum[kRows][kBlockHeads];
  __shared__ __align__(16) float row_acc[kRows][kBlockHeads][kHeadDim];

  const int32_t* work = p.decode_work;
  const int item = blockIdx.x;
  if (item >= work[0]) return;  // the list is shorter than the grid's bound
  const int partition_tokens = work[1];
  const int32_t* entry = work + DecodeWorkItemsOffset(p.num_seqs) + 2 * item;
  const int seq = entry[0];
  const int q_token = p.query_start[seq];
  const int context = p.context_lens[seq];
  const int start = entry[1] * partition_tokens;
  const int n_total = min(partition_tokens, context - start);
  const bool whole_context = context <= partition_tokens;  // finish here, no merge

  const int group = static_cast<int>(p.num_heads / p.num_kv_heads);
  const int chunks = (group + kBlockHeads - 1) / kBlockHeads;
  const int kv_head = blockIdx.y / chunks;
  const int first_head = kv_head * group + (blockIdx.y % chunks) * kBlockHeads;
  const int heads = min(kBlockHeads, (kv_head + 1) * group - first_head);

  const int bs = static_cast<int>(p.block_size);
  const int32_t* table = p.block_tables + seq * p.max_blocks_per_seq;

  const int split = threadIdx.x / kDecodeThreads;
  const int lane = threadIdx.x % kLanesPerRow;
  const int row = threadIdx.x % kDecodeThreads / kLanesPerRow;
  const int my_heads = split * kHeads;  // the first of this thread's heads, in the block
  float q[kHeads][8];
  const float k_scale = kFp8 ? p.k_scales[kv_head] : 1.0f;
  const float v_scale = kFp8 ? p.v_scales[kv_head] : 1.0f;
  const float q_scale = p.scale * kLog2e * k_scale;
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

  for (int chunk = 0; chunk < n_total; chunk += kDecodeChunkTokens) {
    const int n = min(kDecodeChunkTokens, n_total - chunk);
    __syncthreads();  // the previous chunk's slots are read by every thread
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const int pos = start + chunk + i;
      slots[i] = table[pos / bs] * bs + pos % bs;
    }
    __syncthreads();
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
  }  // chunk

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
    o *= v_scale;  // the partials are linear in V: the merge needs no scale
    const int head = first_head + g;
    if (whole_context) {
      p.out[(static_cast<int64_t>(q_token) * p.num_heads + head) * kHeadDim + d] = ToBf16(o / sum);
    } else {
      const int64_t entry = static_cast<int64_t>(item) * p.num_heads + head;
      ws.acc[entry * kHeadDim + d] = o;
      if (d == 0) {
        ws.max[entry] = max_all;
        ws.sum[entry] = sum;
      }
    }
  }
}

// Grid (query head, sequence), one thread per output element: merges the partials of sequences
// whose context the work list cut into more than one item.
template <int kHeadDim>
__global__ void __launch_bounds__(kHeadDim)
    DecodeMergeKernel(PagedAttentionParams p, DecodeWorkspace ws) {
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int32_t* item_start = p.decode_work + 2;
  const int first = item_start[seq];
  const int last = item_start[seq + 1];
  if (last - first <= 1) return;  // no query token, or DecodeKernel wrote the output
  const int q_token = p.query_start[seq];
  float max_all = -INFINITY;
  for (int i = first; i < last; ++i) max_all = fmaxf(max_all, ws.max[i * p.num_heads + head]);
  float sum = 0.0f, o = 0.0f;
  const int d = threadIdx.x;
  for (int i = first; i < last; ++i) {
    const int64_t entry = static_cast<int64_t>(i) * p.num_heads + head;
    const float w = exp2f(ws.max[entry] - max_all);
    sum = fmaf(w, ws.sum[entry], sum);
    o = fmaf(w, ws.acc[entry * kHeadDim + d], o);
  }
  p.out[(static_cast<int64_t>(q_token) * p.num_heads + head) * kHeadDim + d] = ToBf16(o / sum);
}

template <int kHeadDim, int kBlockHeads, bool kFp8>
void LaunchDecode(const PagedAttentionParams& p, DecodeWorkspace ws, cudaStream_t stream) {
  constexpr int kHeads = std::min(kBlockHeads, kDecodeMaxHeadsPerThread);
  constexpr int kSplits = kBlockHeads / kHeads;
  // The planner's own count of blocks per item (DecodeBlockHeads gives kBlockHeads so that the
  // two agree): one rule for both.
  const dim3 grid(
      static_cast<unsigned>(DecodeMaxWorkItems(p.num_seqs, p.num_heads, p.num_kv_heads)),
      static_cast<unsigned>(p.num_kv_heads * DecodeChunksPerKvHead(p.num_heads, p.num_kv_heads)));
  DecodeKernel<kHeadDim, kHeads, kSplits, kFp8>
      <<<grid, kDecodeThreads * kSplits, 0, stream>>>(p, ws);
  CUDA_CHECK(cudaGetLastError());
  // Launched whatever the list holds (a graph replays it for every list); its blocks return at
  // once for sequences that fit one item.
  const dim3 merge_grid(static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_seqs));
  DecodeMergeKernel<kHeadDim><<<merge_grid, kHeadDim, 0, stream>>>(p, ws);
  CUDA_CHECK(cudaGetLastError());
}

template <int kHeadDim, bool kFp8>
void Decode(const PagedAttentionParams& p, cudaStream_t stream) {
  TP_CHECK_MSG(p.decode_work != nullptr, "decode attention needs the batch's work list");
  const DecodeWorkspaceLayout layout =
      DecodeWorkspaceFor(p.num_seqs, p.num_heads, p.num_kv_heads, kHeadDim);
  TP_CHECK_MSG(
      p.workspace != nullptr && p.workspace_bytes >= layout.bytes,
      "paged attention workspace smaller than PagedAttentionWorkspaceBytes(num_seqs, ...)");
  TP_CHECK(reinterpret_cast<uintptr_t>(p.workspace) % 256 == 0);
  char* base = static_cast<char*>(p.workspace);
  DecodeWorkspace ws;
  ws.max = reinterpret_cast<float*>(base);
  ws.sum = reinterpret_cast<float*>(base + layout.sum_offset);
  ws.acc = reinterpret_cast<float*>(base + layout.acc_offset);
  switch (DecodeBlockHeads(p.num_heads / p.num_kv_heads)) {
    case 1:
      return LaunchDecode<kHeadDim, 1, kFp8>(p, ws, stream);
    case 2:
      return LaunchDecode<kHeadDim, 2, kFp8>(p, ws, stream);
    case 4:
      return LaunchDecode<kHeadDim, 4, kFp8>(p, ws, stream);
    default:
      return LaunchDecode<kHeadDim, kDecodeMaxGroup, kFp8>(p, ws, stream);
  }
}

}  // namespace

namespace internal {

void PagedAttentionDecode(const PagedAttentionParams& p, cudaStream_t stream) {
  const bool fp8 = p.k_cache_fp8 != nullptr;
  if (p.head_dim == 64) return fp8 ? Decode<64, true>(p, stream) : Decode<64, false>(p, stream);
  fp8 ? Decode<128, true>(p, stream) : Decode<128, false>(p, stream);
}

}  // namespace internal

}  // namespace tpserve::cuda
