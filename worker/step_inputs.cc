#include "worker/step_inputs.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "kernels/cuda/decode_work.h"

namespace tpserve {

StepInputLayout StepInputLayout::For(int64_t num_tokens, int64_t num_seqs, int64_t num_logits,
                                     int64_t blocks_per_seq, const AttentionHeads& heads) {
  StepInputLayout layout;
  int64_t next = 0;
  auto take = [&next](int64_t count) {
    const int64_t offset = next;
    next += count;
    return offset;
  };
  layout.token_ids = take(num_tokens);
  layout.positions = take(num_tokens);
  layout.query_start = take(num_seqs + 1);
  layout.context_lens = take(num_seqs);
  layout.logits_indices = take(num_logits);
  layout.decode_work = take(cuda::DecodeWorkWords(num_seqs, heads.num_heads, heads.num_kv_heads));
  next += next % 2;
  layout.slot_mapping = take(2 * num_tokens);
  layout.block_tables = take(num_seqs * blocks_per_seq);
  layout.total = next;
  return layout;
}

bool IsDecodeBatch(const ForwardBatch& batch) {
  if (batch.num_tokens() != batch.num_seqs() || batch.num_logits() != batch.num_tokens()) {
    return false;
  }
  for (int64_t i = 0; i < batch.num_tokens(); ++i) {
    if (batch.logits_indices[i] != i || batch.query_start[i + 1] != i + 1) return false;
  }
  return true;
}

PackedStep PackStep(const ForwardBatch& batch, int64_t blocks_per_seq, const AttentionHeads& heads,
                    int64_t pad_to_seqs) {
  const int64_t seqs = std::max(batch.num_seqs(), pad_to_seqs);
  const int64_t pad = seqs - batch.num_seqs();
  TP_CHECK(pad == 0 || IsDecodeBatch(batch));
  PackedStep packed;
  StepShape& shape = packed.shape;
  shape.num_tokens = batch.num_tokens() + pad;
  shape.num_seqs = seqs;
  shape.num_logits = batch.num_logits() + pad;
  shape.blocks_per_seq = blocks_per_seq;
  for (int64_t s = 0; s < batch.num_seqs(); ++s) {
    shape.max_query_len =
        std::max(shape.max_query_len, batch.query_start[s + 1] - batch.query_start[s]);
    shape.max_context_len = std::max(shape.max_context_len, batch.context_lens[s]);
  }
  if (pad > 0) {
    shape.max_query_len = 1;
    shape.max_context_len = std::max(shape.max_context_len, 1);
  }
  const StepInputLayout& layout = packed.layout = StepInputLayout::For(
      shape.num_tokens, shape.num_seqs, shape.num_logits, blocks_per_seq, heads);
  std::vector<int32_t>& data = packed.data;
  data.assign(layout.block_tables, 0);  // padding: token 0, position 0

  const int64_t n = batch.num_tokens();
  std::copy(batch.token_ids.begin(), batch.token_ids.end(), data.begin() + layout.token_ids);
  std::copy(batch.positions.begin(), batch.positions.end(), data.begin() + layout.positions);
  std::copy(batch.query_start.begin(), batch.query_start.end(), data.begin() + layout.query_start);
  std::copy(batch.context_lens.begin(), batch.context_lens.end(),
            data.begin() + layout.context_lens);
  std::copy(batch.logits_indices.begin(), batch.logits_indices.end(),
            data.begin() + layout.logits_indices);
  const int64_t used = packed.used_blocks =
      std::max<int64_t>(1, std::min(blocks_per_seq, batch.max_blocks_per_seq));
  packed.tables.assign(seqs * used, 0);  // padding rows and short rows: block 0
  const int64_t copied = std::min(used, batch.max_blocks_per_seq);
  for (int64_t s = 0; s < batch.num_seqs(); ++s) {
    const auto row = batch.block_tables.begin() + s * batch.max_blocks_per_seq;
    std::copy(row, row + copied, packed.tables.begin() + s * used);
  }
  std::vector<int64_t> slots(batch.slot_mapping);
  slots.resize(shape.num_tokens, -1);
  std::memcpy(data.data() + layout.slot_mapping, slots.data(), slots.size() * sizeof(int64_t));
  for (int64_t i = 0; i < pad; ++i) {
    const int64_t s = batch.num_seqs() + i;
    data[layout.query_start + s + 1] = static_cast<int32_t>(n + i + 1);
    data[layout.context_lens + s] = 1;
    data[layout.logits_indices + s] = static_cast<int32_t>(n + i);
  }
  if (seqs > 0) {
    cuda::BuildDecodeWork(absl::MakeConstSpan(data.data() + layout.context_lens, seqs),
                          absl::MakeConstSpan(data.data() + layout.query_start, seqs + 1),
                          heads.num_heads, heads.num_kv_heads, data.data() + layout.decode_work);
  }
  return packed;
}

}  // namespace tpserve
