#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/cuda_check.h"
#include "kernels/cuda/paged_attention.h"

namespace tpserve::cuda {
namespace {

// Scores are kept in the log2 domain (scale * log2(e) folded into q or into the score), so every
// exponential is one exp2f.
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

// Eight bf16 (one 16-byte load) to fp32: a bf16 is the high half of the fp32 with the same value.
__device__ __forceinline__ void Unpack8(const uint4& raw, float (&f)[8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);  // the lower address holds the lower half
    f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

// Eight fp32 to bf16 (round to nearest even), as one 16-byte value.
__device__ __forceinline__ uint4 Pack8(const float (&f)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);  // .x = low half
    w[i] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// ------------------------------------------------------------------------------------------------
// Decode: split-KV flash-decoding.

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
// memory at the end.
template <int kHeadDim, int kHeads, int kSplits, int kThreads = (kSplits * kDecodeThreads)>
__global__ void __launch_bounds__(kThreads)
    DecodeKernel(PagedAttentionParams p, int partition_tokens, int num_partitions,
                 DecodeWorkspace ws) {
  constexpr int kBlockHeads = kHeads * kSplits;
  constexpr int kLanesPerRow = kHeadDim / 8;
  constexpr int kRows = kDecodeThreads / kLanesPerRow;
  constexpr int kTokensPerLane = 4;
  constexpr int kTokensPerIter = kRows * kTokensPerLane;

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
  const float q_scale = p.scale * kLog2e;
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
  const bf16* k_base = p.k_cache + kv_head * kHeadDim + lane * 8;
  const bf16* v_base = p.v_cache + kv_head * kHeadDim + lane * 8;
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
    uint4 k_raw[kTokensPerLane], v_raw[kTokensPerLane];
    bool valid[kTokensPerLane];
#pragma unroll
    for (int u = 0; u < kTokensPerLane; ++u) {
      const int i = base + u * kRows + row;
      valid[u] = i < n;
      k_raw[u] = v_raw[u] = make_uint4(0, 0, 0, 0);
      if (valid[u]) {
        const int64_t offset = slots[i] * slot_stride;
        k_raw[u] = __ldg(reinterpret_cast<const uint4*>(k_base + offset));
        v_raw[u] = __ldg(reinterpret_cast<const uint4*>(v_base + offset));
      }
    }

    float s[kTokensPerLane][kHeads];
#pragma unroll
    for (int u = 0; u < kTokensPerLane; ++u) {
      float k[8];
      Unpack8(k_raw[u], k);
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
      Unpack8(v_raw[u], v);
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

template <int kHeadDim, int kBlockHeads>
void LaunchDecode(const PagedAttentionParams& p, const DecodeSplit& split, DecodeWorkspace ws,
                  cudaStream_t stream) {
  constexpr int kHeads = std::min(kBlockHeads, kDecodeMaxHeadsPerThread);
  constexpr int kSplits = kBlockHeads / kHeads;
  const int64_t group = p.num_heads / p.num_kv_heads;
  const dim3 grid(split.num_partitions,
                  static_cast<unsigned>(p.num_kv_heads * ((group + kBlockHeads - 1) / kBlockHeads)),
                  static_cast<unsigned>(p.num_seqs));
  DecodeKernel<kHeadDim, kHeads, kSplits><<<grid, kDecodeThreads * kSplits, 0, stream>>>(
      p, split.partition_tokens, split.num_partitions, ws);
  CUDA_CHECK(cudaGetLastError());
  if (split.num_partitions > 1) {
    const dim3 merge_grid(static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_seqs));
    DecodeMergeKernel<kHeadDim>
        <<<merge_grid, kHeadDim, 0, stream>>>(p, split.partition_tokens, split.num_partitions, ws);
    CUDA_CHECK(cudaGetLastError());
  }
}

template <int kHeadDim>
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
      return LaunchDecode<kHeadDim, 1>(p, split, ws, stream);
    case 2:
      return LaunchDecode<kHeadDim, 2>(p, split, ws, stream);
    case 4:
      return LaunchDecode<kHeadDim, 4>(p, split, ws, stream);
    default:
      return LaunchDecode<kHeadDim, kDecodeMaxGroup>(p, split, ws, stream);
  }
}

// ------------------------------------------------------------------------------------------------
// Prefill: FlashAttention-2 on tensor cores (WMMA 16x16x16, bf16 in, fp32 accumulate).

constexpr int kTileM = 64;  // query tokens per block; warp w owns rows [16 w, 16 w + 16)
constexpr int kTileN = 64;  // keys per K/V tile
constexpr int kPrefillWarps = kTileM / 16;
constexpr int kPrefillThreads = kPrefillWarps * 32;

// Shared-memory layout of one prefill block. Row strides are padded (+16 bytes for bf16, +16 for
// fp32) so that consecutive rows start in different banks; every WMMA tile then starts at a
// 32-byte multiple, as load/store_matrix_sync require.
template <int kHeadDim>
struct PrefillSmem {
  static constexpr int kLdQkv = kHeadDim + 8;  // bf16 elements per row of the Q, K and V tiles
  static constexpr int kLdS = kTileN + 4;      // fp32 elements per row of the scores
  static constexpr int kLdP = kTileN + 8;      // bf16 elements per row of the softmax weights
  static constexpr int kLdO = kHeadDim + 4;    // fp32 elements per row of the output accumulator
  static constexpr size_t kQ = 0;              // [kTileM, kLdQkv] bf16
  static constexpr size_t kK = kQ + size_t{kTileM} * kLdQkv * 2;  // [kTileN, kLdQkv] bf16
  static constexpr size_t kV = kK + size_t{kTileN} * kLdQkv * 2;  // [kTileN, kLdQkv] bf16
  static constexpr size_t kS = kV + size_t{kTileN} * kLdQkv * 2;  // [kTileM, kLdS] fp32
  static constexpr size_t kP = kS + size_t{kTileM} * kLdS * 4;    // [kTileM, kLdP] bf16
  static constexpr size_t kO = kP + size_t{kTileM} * kLdP * 2;    // [kTileM, kLdO] fp32
  static constexpr size_t kBytes = kO + size_t{kTileM} * kLdO * 4;
  static_assert(kK % 128 == 0 && kV % 128 == 0 && kS % 128 == 0 && kP % 128 == 0 && kO % 128 == 0);
};

// 16 bytes global -> shared without a register round trip; with `valid` false the destination is
// zero-filled and nothing is read (src must still be a valid address).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  const unsigned dst_addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_addr), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most `kPending` of this thread's most recent groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Queues the copy of a [kRowsTile, kHeadDim] tile: row r < valid_rows from row_src(r) (kHeadDim
// contiguous bf16), zeros for the rest, so that masked rows are finite (0 * garbage could be NaN
// in the tensor-core products).
template <int kHeadDim, int kRowsTile, typename RowSrc>
__device__ __forceinline__ void LoadTileAsync(bf16* dst, int valid_rows, const bf16* fallback,
                                              RowSrc row_src) {
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  constexpr int kLd = PrefillSmem<kHeadDim>::kLdQkv;
  for (int c = threadIdx.x; c < kRowsTile * kChunks; c += kPrefillThreads) {
    const int r = c / kChunks;
    const int col = (c % kChunks) * 8;
    const bool valid = r < valid_rows;
    CpAsync16(dst + r * kLd + col, valid ? row_src(r) + col : fallback, valid);
  }
}

// Grid (query tile, query head, sequence), kPrefillThreads threads, PrefillSmem::kBytes of
// dynamic shared memory. Query row i of the tile is token m_start + i of the sequence, at
// position first_pos + i; it sees keys [0, first_pos + i].
//
// Per K/V tile: S = Q K^T (each warp its 16-row strip, Q fragments held in registers since the
// first tile); online softmax by the same warp (2 lanes per row, fp32), which writes P in bf16
// and rescales its rows of O in shared memory; O += P V. Between the steps the next K tile loads
// during softmax and P V, the next V tile during the next Q K^T (cp.async groups, always
// committed, possibly empty, so the wait counts stay fixed).
template <int kHeadDim>
__global__ void __launch_bounds__(kPrefillThreads) PrefillKernel(PagedAttentionParams p) {
  namespace wmma = nvcuda::wmma;
  using L = PrefillSmem<kHeadDim>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* k_s = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* v_s = reinterpret_cast<bf16*>(smem + L::kV);
  float* s_s = reinterpret_cast<float*>(smem + L::kS);
  bf16* p_s = reinterpret_cast<bf16*>(smem + L::kP);
  float* o_s = reinterpret_cast<float*>(smem + L::kO);

  const int seq = blockIdx.z;
  const int head = blockIdx.y;
  // Later tiles see more keys: start them first so that the short ones fill the tail.
  const int m_start = (gridDim.x - 1 - blockIdx.x) * kTileM;
  const int q_begin = p.query_start[seq];
  const int q_len = p.query_start[seq + 1] - q_begin;
  if (m_start >= q_len) return;
  const int rows = min(kTileM, q_len - m_start);
  const int first_pos = p.context_lens[seq] - q_len + m_start;
  const int num_keys = first_pos + rows;  // keys [0, num_keys) are visible to some row
  const int num_tiles = (num_keys + kTileN - 1) / kTileN;

  const int kv_head = static_cast<int>(head / (p.num_heads / p.num_kv_heads));
  const int64_t slot_stride = p.num_kv_heads * kHeadDim;
  const int bs = static_cast<int>(p.block_size);
  const int32_t* table = p.block_tables + seq * p.max_blocks_per_seq;
  const bf16* q_rows =
      p.q + (static_cast<int64_t>(q_begin + m_start) * p.num_heads + head) * kHeadDim;
  const int64_t q_row_stride = p.num_heads * kHeadDim;
  auto kv_offset = [&](int tile, int r) {
    const int pos = tile * kTileN + r;
    const int64_t slot = static_cast<int64_t>(table[pos / bs]) * bs + pos % bs;
    return slot * slot_stride + kv_head * kHeadDim;
  };
  auto load_k = [&](int tile) {
    LoadTileAsync<kHeadDim, kTileN>(k_s, min(kTileN, num_keys - tile * kTileN), p.k_cache,
                                    [&](int r) { return p.k_cache + kv_offset(tile, r); });
  };
  auto load_v = [&](int tile) {
    LoadTileAsync<kHeadDim, kTileN>(v_s, min(kTileN, num_keys - tile * kTileN), p.v_cache,
                                    [&](int r) { return p.v_cache + kv_offset(tile, r); });
  };

  LoadTileAsync<kHeadDim, kTileM>(q_s, rows, p.q, [&](int r) { return q_rows + r * q_row_stride; });
  load_k(0);
  CpAsyncCommit();
  load_v(0);
  CpAsyncCommit();
  for (int i = threadIdx.x; i < kTileM * L::kLdO; i += kPrefillThreads) o_s[i] = 0.0f;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  // Softmax role: two lanes per row of the warp's strip, each with half of the tile's keys and
  // half of the output columns. Both lanes keep the row's running max and sum.
  constexpr int kHalfN = kTileN / 2;
  constexpr int kHalfD = kHeadDim / 2;
  const int my_row = warp * 16 + lane / 2;
  const int half = lane % 2;
  const bool row_valid = my_row < rows;
  const int my_pos = first_pos + my_row;
  float run_max = -INFINITY;  // log2 domain
  float run_sum = 0.0f;
  const float scale_log2 = p.scale * kLog2e;

  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> q_frag[kHeadDim / 16];

  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<1>();  // Q and K(t) have landed; V(t) may still be in flight
    __syncthreads();
    if (t == 0) {
#pragma unroll
      for (int k = 0; k < kHeadDim / 16; ++k) {
        wmma::load_matrix_sync(q_frag[k], q_s + warp * 16 * L::kLdQkv + k * 16, L::kLdQkv);
      }
    }
#pragma unroll
    for (int j = 0; j < kTileN / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> s_frag;
      wmma::fill_fragment(s_frag, 0.0f);
#pragma unroll
      for (int k = 0; k < kHeadDim / 16; ++k) {
        // K^T as a column-major B: element (d, key) at k_s[key * ld + d].
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> k_frag;
        wmma::load_matrix_sync(k_frag, k_s + j * 16 * L::kLdQkv + k * 16, L::kLdQkv);
        wmma::mma_sync(s_frag, q_frag[k], k_frag, s_frag);
      }
      wmma::store_matrix_sync(s_s + warp * 16 * L::kLdS + j * 16, s_frag, L::kLdS,
                              wmma::mem_row_major);
    }
    __syncthreads();  // every warp is done with K(t); S strips are visible to their warps
    if (t + 1 < num_tiles) load_k(t + 1);
    CpAsyncCommit();

    {
      const int key0 = t * kTileN + half * kHalfN;
      // Keys key0 .. key0 + visible - 1 of this half are causal-visible to the row.
      const int visible = row_valid ? max(0, min(kHalfN, my_pos - key0 + 1)) : 0;
      float s[kHalfN];
      const float4* s_row = reinterpret_cast<const float4*>(s_s + my_row * L::kLdS + half * kHalfN);
#pragma unroll
      for (int c = 0; c < kHalfN / 4; ++c) {
        const float4 v = s_row[c];
        s[4 * c] = v.x * scale_log2;
        s[4 * c + 1] = v.y * scale_log2;
        s[4 * c + 2] = v.z * scale_log2;
        s[4 * c + 3] = v.w * scale_log2;
      }
      float tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < kHalfN; ++c) {
        if (c < visible) tile_max = fmaxf(tile_max, s[c]);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
      const float new_max = fmaxf(run_max, tile_max);
      // Key 0 is visible to every valid row, so new_max is finite after the first tile except
      // for rows past the sequence's query tokens, which stay all-zero.
      const float ref = new_max == -INFINITY ? 0.0f : new_max;
      const float correction = exp2f(run_max - ref);
      run_max = new_max;
      float tile_sum = 0.0f;
      uint4* p_row = reinterpret_cast<uint4*>(p_s + my_row * L::kLdP + half * kHalfN);
#pragma unroll
      for (int c8 = 0; c8 < kHalfN / 8; ++c8) {
        float w[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int c = c8 * 8 + j;
          w[j] = c < visible ? exp2f(s[c] - ref) : 0.0f;
          tile_sum += w[j];
        }
        p_row[c8] = Pack8(w);
      }
      tile_sum += __shfl_xor_sync(kFullMask, tile_sum, 1);
      run_sum = run_sum * correction + tile_sum;
      if (correction != 1.0f) {
        float4* o_row = reinterpret_cast<float4*>(o_s + my_row * L::kLdO + half * kHalfD);
#pragma unroll 4
        for (int c = 0; c < kHalfD / 4; ++c) {
          float4 o = o_row[c];
          o.x *= correction;
          o.y *= correction;
          o.z *= correction;
          o.w *= correction;
          o_row[c] = o;
        }
      }
    }

    CpAsyncWait<1>();  // V(t) has landed; K(t + 1) may still be in flight
    __syncthreads();   // V(t), and this warp's P and O rows, visible to all its lanes
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> p_frag[kTileN / 16];
#pragma unroll
    for (int k = 0; k < kTileN / 16; ++k) {
      wmma::load_matrix_sync(p_frag[k], p_s + warp * 16 * L::kLdP + k * 16, L::kLdP);
    }
#pragma unroll
    for (int n = 0; n < kHeadDim / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> o_frag;
      float* o_tile = o_s + warp * 16 * L::kLdO + n * 16;
      wmma::load_matrix_sync(o_frag, o_tile, L::kLdO, wmma::mem_row_major);
#pragma unroll
      for (int k = 0; k < kTileN / 16; ++k) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> v_frag;
        wmma::load_matrix_sync(v_frag, v_s + k * 16 * L::kLdQkv + n * 16, L::kLdQkv);
        wmma::mma_sync(o_frag, p_frag[k], v_frag, o_frag);
      }
      wmma::store_matrix_sync(o_tile, o_frag, L::kLdO, wmma::mem_row_major);
    }
    __syncthreads();  // every warp is done with V(t); O strips are visible to their warps
    if (t + 1 < num_tiles) load_v(t + 1);
    CpAsyncCommit();
  }

  if (row_valid) {
    const float inv_sum = 1.0f / run_sum;
    const float* o_row = o_s + my_row * L::kLdO + half * kHalfD;
    uint4* dst = reinterpret_cast<uint4*>(
        p.out + (static_cast<int64_t>(q_begin + m_start + my_row) * p.num_heads + head) * kHeadDim +
        half * kHalfD);
#pragma unroll
    for (int c8 = 0; c8 < kHalfD / 8; ++c8) {
      float o[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = o_row[c8 * 8 + j] * inv_sum;
      dst[c8] = Pack8(o);
    }
  }
}

template <int kHeadDim>
void Prefill(const PagedAttentionParams& p, cudaStream_t stream) {
  constexpr size_t kSmem = PrefillSmem<kHeadDim>::kBytes;
  // Over the 48 KB default for dynamic shared memory (110 KB at head_dim 128; sm_80 allows 163).
  CUDA_CHECK(cudaFuncSetAttribute(PrefillKernel<kHeadDim>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid((p.max_query_len + kTileM - 1) / kTileM, static_cast<unsigned>(p.num_heads),
                  static_cast<unsigned>(p.num_seqs));
  PrefillKernel<kHeadDim><<<grid, kPrefillThreads, kSmem, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

absl::Status PagedAttentionSupported(int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                                     int64_t block_size) {
  if (head_dim != 64 && head_dim != 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA paged attention supports head_dim 64 and 128, not ", head_dim));
  }
  // 65535: the grid's y limit (query heads in prefill).
  if (num_heads <= 0 || num_kv_heads <= 0 || num_heads > 65535 || num_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA paged attention needs 0 < num_heads <= 65535 and num_heads a multiple "
                     "of num_kv_heads, not num_heads ",
                     num_heads, ", num_kv_heads ", num_kv_heads));
  }
  if (block_size <= 0 || block_size > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA paged attention needs 0 < block_size <= 2^20, not ", block_size));
  }
  return absl::OkStatus();
}

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

void PagedAttention(const PagedAttentionParams& p, cudaStream_t stream) {
  const absl::Status supported =
      PagedAttentionSupported(p.num_heads, p.num_kv_heads, p.head_dim, p.block_size);
  TP_CHECK_MSG(supported.ok(), supported.ToString().c_str());
  // 65535: the grid's z limit (sequences); 2^31: positions and token indices are int32.
  TP_CHECK(p.num_seqs >= 0 && p.num_seqs <= 65535);
  TP_CHECK(p.num_tokens >= 0 && p.num_tokens <= p.num_seqs * int64_t{p.max_query_len});
  TP_CHECK(p.max_query_len >= 0 && p.max_query_len <= p.max_context_len);
  TP_CHECK(p.max_context_len <= p.max_blocks_per_seq * p.block_size);
  if (p.num_seqs == 0 || p.num_tokens == 0) return;
  TP_CHECK(p.query_start != nullptr && p.context_lens != nullptr && p.block_tables != nullptr);
  // The kernels move 16 bytes at a time.
  TP_CHECK(Aligned16(p.q) && Aligned16(p.k_cache) && Aligned16(p.v_cache) && Aligned16(p.out));
  if (p.max_query_len <= 1) {
    if (p.head_dim == 64) return Decode<64>(p, stream);
    return Decode<128>(p, stream);
  }
  if (p.head_dim == 64) return Prefill<64>(p, stream);
  Prefill<128>(p, stream);
}

}  // namespace tpserve::cuda
