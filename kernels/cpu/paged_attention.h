// Causal grouped-query attention over the paged KV cache (fp32 or FP8 E4M3, CPU).
//
// Cache layout (one layer, this rank's KV heads), as in DESIGN.md "KV cache and the prefix tree":
//   k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim]
// A token's slot is  block_id * block_size + offset_in_block; the K (or V) vector of slot s and
// KV head g starts at  (s * num_kv_heads + g) * head_dim.
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// Stores this step's K and V into their slots: k_cache[slot_mapping[t], :, :] = k[t, :, :].
//   k, v:         [num_tokens, num_kv_heads, head_dim]
//   slot_mapping: [num_tokens]; block_id * block_size + offset. A negative slot skips the token
//                 (padding). The caller guarantees slots are inside the cache.
//   k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim]
void WriteKvCache(const float* k, const float* v, const int64_t* slot_mapping, int64_t num_tokens,
                  int64_t num_kv_heads, int64_t head_dim, float* k_cache, float* v_cache);

// The same into an FP8 cache: each value of KV head g stored as QuantizeE4m3's code of
// value / k_scales[g] (of V: v_scales[g]) (kernels/cpu/fp8_e4m3.h).
//   k_scales, v_scales: [num_kv_heads], finite and positive
void WriteKvCacheFp8(const float* k, const float* v, const int64_t* slot_mapping,
                     int64_t num_tokens, int64_t num_kv_heads, int64_t head_dim,
                     const float* k_scales, const float* v_scales, uint8_t* k_cache,
                     uint8_t* v_cache);

struct PagedAttentionParams {
  const float* q =
      nullptr;  // [num_tokens, num_heads, head_dim], num_tokens = query_start[num_seqs]
  const float* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  const float* v_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  // Or an FP8 cache (k_cache and v_cache null), laid out the same: KV head g's K values are
  // FromE4m3(code) * k_scales[g], its V values FromE4m3(code) * v_scales[g].
  const uint8_t* k_cache_fp8 = nullptr;
  const uint8_t* v_cache_fp8 = nullptr;
  const float* k_scales = nullptr;  // [num_kv_heads], with an FP8 cache
  const float* v_scales = nullptr;  // [num_kv_heads], with an FP8 cache
  int64_t num_seqs = 0;
  // [num_seqs + 1] prefix offsets into q's tokens: sequence s owns tokens
  // [query_start[s], query_start[s + 1]). query_start[0] == 0; a sequence may have 0 tokens.
  const int32_t* query_start = nullptr;
  // [num_seqs] tokens of the sequence in the cache INCLUDING this step's tokens (which must
  // already be written with WriteKvCache). The q_len = query_start[s + 1] - query_start[s] query
  // tokens are the LAST q_len positions: query token j sits at position context_len - q_len + j
  // and attends to cache positions [0, that position] (causal).
  const int32_t* context_lens = nullptr;
  // [num_seqs, max_blocks_per_seq] block ids; entries past ceil(context_len / block_size) are
  // never read.
  const int32_t* block_tables = nullptr;
  int64_t max_blocks_per_seq = 0;
  int64_t num_heads = 0;     // query heads on this rank
  int64_t num_kv_heads = 0;  // KV heads on this rank; num_heads % num_kv_heads == 0
  int64_t head_dim = 0;
  int64_t block_size = 0;  // tokens per block
  float scale = 0.0f;      // softmax scale, normally 1 / sqrt(head_dim)
  // Sliding-window attention (Mistral, Phi-3, Gemma 3's local layers): a query at position p
  // attends to positions (p - window, p] only; 0 for the whole causal context.
  int64_t window = 0;
  float* out = nullptr;    // [num_tokens, num_heads, head_dim]; must not overlap the inputs
};

// out[t, h, :] = sum_p softmax_p(scale * q[t, h] . K[p, g]) V[p, g], over the cache positions p
// that token t may see, where g = h / (num_heads / num_kv_heads) is the KV head of query head h.
// Softmax is computed online block by block (running max and sum, fp32), so no exp sees a
// positive argument. The query heads of one KV head are processed together, so each K/V row is
// read once per token. Threads: ParallelFor over (token, KV head) pairs; a single
// decoding sequence therefore uses at most num_kv_heads threads.
void PagedAttention(const PagedAttentionParams& p);

}  // namespace tpserve::cpu
