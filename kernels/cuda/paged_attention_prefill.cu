// The prefill half of PagedAttention (the design and its costs: kernels/cuda/paged_attention.h):
// FlashAttention-2 on tensor cores (WMMA 16x16x16, bf16 in, fp32 accumulate) for every batch
// with a sequence of more than one query token, decode tokens of a mixed batch included.
#include <mma.h>

#include <cmath>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/paged_attention_common.cuh"

namespace tpserve::cuda {
namespace {

using internal::kFullMask;
using internal::kLog2e;
using internal::Pack8;
using internal::UnpackE4m3x8;

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

// The same tile from an FP8 cache: row r < valid_rows from row_src(r) (kHeadDim E4M3 codes),
// decoded to bf16 (exactly: E4M3 values are bf16 values) with plain 8-byte loads and stored to
// shared memory, zeros for the rest. Visible after the next __syncthreads, as the cp.async copies
// are after their wait.
template <int kHeadDim, int kRowsTile, typename RowSrc>
__device__ __forceinline__ void LoadTileFp8(bf16* dst, int valid_rows, RowSrc row_src) {
  constexpr int kChunks = kHeadDim / 8;  // 8-byte chunks per row
  constexpr int kLd = PrefillSmem<kHeadDim>::kLdQkv;
  for (int c = threadIdx.x; c < kRowsTile * kChunks; c += kPrefillThreads) {
    const int r = c / kChunks;
    const int col = (c % kChunks) * 8;
    uint4 packed = make_uint4(0, 0, 0, 0);
    if (r < valid_rows) {
      float f[8];
      UnpackE4m3x8(__ldg(reinterpret_cast<const uint2*>(row_src(r) + col)), f);
      packed = Pack8(f);
    }
    *reinterpret_cast<uint4*>(dst + r * kLd + col) = packed;
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
// committed, possibly empty, so the wait counts stay fixed). kFp8: K/V tiles come from an FP8
// cache (LoadTileFp8); the KV head's K scale joins the score scale and its V scale the output's
// normalizer.
template <int kHeadDim, bool kFp8>
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
  if (m_start >= q_len || q_len == 1) return;  // a decode row: the decode kernel's
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
  auto load_kv = [&](bf16* dst, int tile, const bf16* cache, const uint8_t* cache_fp8) {
    const int valid = min(kTileN, num_keys - tile * kTileN);
    if constexpr (kFp8) {
      LoadTileFp8<kHeadDim, kTileN>(dst, valid,
                                    [&](int r) { return cache_fp8 + kv_offset(tile, r); });
    } else {
      LoadTileAsync<kHeadDim, kTileN>(dst, valid, cache,
                                      [&](int r) { return cache + kv_offset(tile, r); });
    }
  };
  auto load_k = [&](int tile) { load_kv(k_s, tile, p.k_cache, p.k_cache_fp8); };
  auto load_v = [&](int tile) { load_kv(v_s, tile, p.v_cache, p.v_cache_fp8); };

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
  const float k_scale = kFp8 ? p.k_scales[kv_head] : 1.0f;
  const float v_scale = kFp8 ? p.v_scales[kv_head] : 1.0f;
  const float scale_log2 = p.scale * kLog2e * k_scale;

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
    const float inv_sum = v_scale / run_sum;
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

template <int kHeadDim, bool kFp8>
void Prefill(const PagedAttentionParams& p, cudaStream_t stream) {
  constexpr size_t kSmem = PrefillSmem<kHeadDim>::kBytes;
  // Over the 48 KB default for dynamic shared memory (110 KB at head_dim 128; sm_80 allows 163).
  CUDA_CHECK(cudaFuncSetAttribute(PrefillKernel<kHeadDim, kFp8>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid((p.max_query_len + kTileM - 1) / kTileM, static_cast<unsigned>(p.num_heads),
                  static_cast<unsigned>(p.num_seqs));
  PrefillKernel<kHeadDim, kFp8><<<grid, kPrefillThreads, kSmem, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

namespace internal {

void PagedAttentionPrefill(const PagedAttentionParams& p, cudaStream_t stream) {
  const bool fp8 = p.k_cache_fp8 != nullptr;
  if (p.head_dim == 64) return fp8 ? Prefill<64, true>(p, stream) : Prefill<64, false>(p, stream);
  fp8 ? Prefill<128, true>(p, stream) : Prefill<128, false>(p, stream);
}

}  // namespace internal

}  // namespace tpserve::cuda
