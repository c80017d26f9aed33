#include "worker/forward_batch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace tpserve {

void ForwardBatchBuilder::AddSequenceWithLogits(absl::Span<const int32_t> tokens,
                                                int32_t start_position,
                                                absl::Span<const int32_t> block_table,
                                                int64_t num_logits, int32_t adapter) {
  TP_CHECK(!tokens.empty());
  TP_CHECK(num_logits >= 1 && num_logits <= static_cast<int64_t>(tokens.size()));
  const size_t first_logits = tokens.size() - num_logits;
  const int64_t end = start_position + static_cast<int64_t>(tokens.size());
  TP_CHECK(static_cast<int64_t>(block_table.size()) * block_size_ >= end);
  if (batch_.query_start.empty()) batch_.query_start.push_back(0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t position = start_position + static_cast<int32_t>(i);
    if (i >= first_logits) {
      batch_.logits_indices.push_back(static_cast<int32_t>(batch_.token_ids.size()));
    }
    batch_.token_ids.push_back(tokens[i]);
    batch_.positions.push_back(position);
    batch_.slot_mapping.push_back(int64_t{block_table[position / block_size_]} * block_size_ +
                                  position % block_size_);
  }
  batch_.query_start.push_back(static_cast<int32_t>(batch_.token_ids.size()));
  batch_.context_lens.push_back(static_cast<int32_t>(end));
  batch_.adapters.push_back(adapter);
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

absl::Status ValidateForwardBatch(const ForwardBatch& batch, const ModelConfig& config,
                                  const KvCacheShape& kv) {
  const int64_t n = batch.num_tokens();
  const int64_t seqs = batch.num_seqs();
  if (n == 0) return absl::InvalidArgumentError("forward batch has no tokens");
  if (static_cast<int64_t>(batch.positions.size()) != n ||
      static_cast<int64_t>(batch.slot_mapping.size()) != n ||
      static_cast<int64_t>(batch.query_start.size()) != seqs + 1 ||
      static_cast<int64_t>(batch.block_tables.size()) != seqs * batch.max_blocks_per_seq ||
      (!batch.adapters.empty() && static_cast<int64_t>(batch.adapters.size()) != seqs) ||
      batch.query_start.front() != 0 || batch.query_start.back() != n) {
    return absl::InvalidArgumentError("forward batch arrays have inconsistent lengths");
  }
  const int64_t slots = kv.num_blocks * kv.block_size;
  for (int64_t i = 0; i < n; ++i) {
    if (batch.token_ids[i] < 0 || batch.token_ids[i] >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", batch.token_ids[i],
                                                     " is outside the vocabulary of ",
                                                     config.vocab_size));
    }
    if (batch.slot_mapping[i] < 0 || batch.slot_mapping[i] >= slots) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV slot ", batch.slot_mapping[i], " is outside the pool of ", slots));
    }
  }
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t q_len = batch.query_start[s + 1] - batch.query_start[s];
    const int64_t context = batch.context_lens[s];
    if (q_len <= 0 || context < q_len || context > config.context_length ||
        (context + kv.block_size - 1) / kv.block_size > batch.max_blocks_per_seq) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " of the batch has ", q_len,
                                                     " new tokens and context ", context,
                                                     ", which its block table cannot hold"));
    }
    for (int64_t b = 0; b < batch.max_blocks_per_seq; ++b) {
      const int32_t block = batch.block_tables[s * batch.max_blocks_per_seq + b];
      if (block < 0 || block >= kv.num_blocks) {
        return absl::InvalidArgumentError(
            absl::StrCat("block id ", block, " is outside the pool of ", kv.num_blocks));
      }
    }
  }
  for (int32_t index : batch.logits_indices) {
    if (index < 0 || index >= n) {
      return absl::InvalidArgumentError(absl::StrCat("logits index ", index, " out of range"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve
