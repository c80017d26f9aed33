#include "kernels/cuda/decode_work.h"

#include <algorithm>

#include "common/check.h"

namespace tpserve::cuda {
namespace {

size_t AlignUp256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

int64_t DecodeChunksPerKvHead(int64_t num_heads, int64_t num_kv_heads) {
  TP_CHECK(num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0);
  return (num_heads / num_kv_heads + kDecodeMaxGroup - 1) / kDecodeMaxGroup;
}

int64_t DecodeMaxWorkItems(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads) {
  TP_CHECK(num_seqs >= 0);
  const int64_t blocks_per_item = num_kv_heads * DecodeChunksPerKvHead(num_heads, num_kv_heads);
  return (kDecodeMinBlocks + blocks_per_item - 1) / blocks_per_item + num_seqs;
}

int64_t DecodeWorkWords(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads) {
  return DecodeWorkItemsOffset(num_seqs) +
         2 * DecodeMaxWorkItems(num_seqs, num_heads, num_kv_heads);
}

void BuildDecodeWork(absl::Span<const int32_t> context_lens, absl::Span<const int32_t> query_start,
                     int64_t num_heads, int64_t num_kv_heads, int32_t* out) {
  const int64_t num_seqs = static_cast<int64_t>(context_lens.size());
  TP_CHECK(static_cast<int64_t>(query_start.size()) == num_seqs + 1);
  const int64_t max_items = DecodeMaxWorkItems(num_seqs, num_heads, num_kv_heads);
  const int64_t target = max_items - num_seqs;  // items that fill kDecodeMinBlocks blocks
  int64_t total = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    TP_CHECK(context_lens[s] >= 1);
    if (query_start[s + 1] - query_start[s] == 1) total += context_lens[s];
  }
  // sum ceil(c / P) <= total / P + num_seqs <= target + num_seqs when P >= total / target.
  const int64_t tokens = std::max<int64_t>((total + target - 1) / target, 1);
  const int64_t partition =
      (tokens + kDecodeMinPartition - 1) / kDecodeMinPartition * kDecodeMinPartition;
  int32_t* item_start = out + 2;
  int32_t* items = out + DecodeWorkItemsOffset(num_seqs);
  int64_t count = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    item_start[s] = static_cast<int32_t>(count);
    if (query_start[s + 1] - query_start[s] != 1) continue;
    const int64_t parts = (context_lens[s] + partition - 1) / partition;
    for (int64_t j = 0; j < parts; ++j, ++count) {
      items[2 * count] = static_cast<int32_t>(s);
      items[2 * count + 1] = static_cast<int32_t>(j);
    }
  }
  item_start[num_seqs] = static_cast<int32_t>(count);
  TP_CHECK(count <= max_items);
  out[0] = static_cast<int32_t>(count);
  out[1] = static_cast<int32_t>(partition);
}

DecodeWorkspaceLayout DecodeWorkspaceFor(int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads,
                                         int64_t head_dim) {
  const int64_t entries = DecodeMaxWorkItems(num_seqs, num_heads, num_kv_heads) * num_heads;
  const size_t stats = AlignUp256(static_cast<size_t>(entries) * sizeof(float));
  DecodeWorkspaceLayout layout;
  layout.sum_offset = stats;
  layout.acc_offset = 2 * stats;
  layout.bytes = 2 * stats + AlignUp256(static_cast<size_t>(entries * head_dim) * sizeof(float));
  return layout;
}

size_t PagedAttentionWorkspaceBytes(int64_t max_num_seqs, int64_t num_heads, int64_t num_kv_heads,
                                    int64_t head_dim) {
  return DecodeWorkspaceFor(max_num_seqs, num_heads, num_kv_heads, head_dim).bytes;
}

}  // namespace tpserve::cuda
