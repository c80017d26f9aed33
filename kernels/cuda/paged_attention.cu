// PagedAttention's checks and its dispatch to the decode kernels (paged_attention_decode.cu) or
// the prefill kernel (paged_attention_prefill.cu).
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/paged_attention_common.cuh"

namespace tpserve::cuda {
namespace {

bool Aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

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
  TP_CHECK(p.query_start != nullptr && p.context_lens != nullptr && p.block_tables != nullptr &&
           p.decode_work != nullptr);
  const bool fp8 = p.k_cache_fp8 != nullptr;
  TP_CHECK_MSG(fp8 == (p.v_cache_fp8 != nullptr) && fp8 == (p.k_cache == nullptr) &&
                   fp8 == (p.v_cache == nullptr),
               "paged attention needs K and V both in bf16 or both in FP8");
  // The kernels move 16 bytes at a time (8 of an FP8 cache row).
  TP_CHECK(Aligned(p.q, 16) && Aligned(p.out, 16));
  TP_CHECK(fp8 ? Aligned(p.k_cache_fp8, 8) && Aligned(p.v_cache_fp8, 8)
               : Aligned(p.k_cache, 16) && Aligned(p.v_cache, 16));
  TP_CHECK(!fp8 || (p.k_scales != nullptr && p.v_scales != nullptr));
  // Sequences with one query token go through the decode kernel, in a mixed batch too; the
  // prefill kernel takes the others (the two write disjoint rows of `out`).
  if (p.max_query_len > 1) internal::PagedAttentionPrefill(p, stream);
  internal::PagedAttentionDecode(p, stream);
}

}  // namespace tpserve::cuda
