#include "worker/forward_batch.h"

#include <algorithm>

#include "common/check.h"

namespace tpserve {

void ForwardBatchBuilder::AddSequence(absl::Span<const int32_t> tokens, int32_t start_position,
                                      absl::Span<const int32_t> block_table, bool all_logits) {
  TP_CHECK(!tokens.empty());
  const int64_t end = start_position + static_cast<int64_t>(tokens.size());
  TP_CHECK(static_cast<int64_t>(block_table.size()) * block_size_ >= end);
  if (batch_.query_start.empty()) batch_.query_start.push_back(0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t position = start_position + static_cast<int32_t>(i);
    if (all_logits || i + 1 == tokens.size()) {
      batch_.logits_indices.push_back(static_cast<int32_t>(batch_.token_ids.size()));
    }
    batch_.token_ids.push_back(tokens[i]);
    batch_.positions.push_back(position);
    batch_.slot_mapping.push_back(int64_t{block_table[position / block_size_]} * block_size_ +
                                  position % block_size_);
  }
  batch_.query_start.push_back(static_cast<int32_t>(batch_.token_ids.size()));
  batch_.context_lens.push_back(static_cast<int32_t>(end));
  tables_.emplace_back(block_table.begin(), block_table.end());
}

ForwardBatch ForwardBatchBuilder::Build() {
  int64_t width = 0;
  for (const auto& table : tables_) width = std::max<int64_t>(width, table.size());
  batch_.max_blocks_per_seq = width;
  batch_.block_tables.assign(tables_.size() * width, 0);
  for (size_t s = 0; s < tables_.size(); ++s) {
    std::copy(tables_[s].begin(), tables_[s].end(), batch_.block_tables.begin() + s * width);
  }
  tables_.clear();
  return std::move(batch_);
}

}  // namespace tpserve
