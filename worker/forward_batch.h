// The tensors one model step consumes on a rank: the tokens of several sequences, each at its own
// position, with the paged-KV addressing for them. Built from a StepRequest on workers and
// directly by single-process tools; ForwardBatchBuilder is the one place that lays it out.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/model_config.h"
#include "worker/kv_cache.h"

namespace tpserve {

struct ForwardBatch {
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens] absolute position in its sequence
  std::vector<int64_t> slot_mapping;  // [num_tokens] block_id * block_size + offset in block
  std::vector<int32_t> query_start;   // [num_seqs + 1] first token of each sequence
  std::vector<int32_t> context_lens;  // [num_seqs] cached tokens after this step
  std::vector<int32_t> block_tables;  // [num_seqs, max_blocks_per_seq], unused entries 0
  int64_t max_blocks_per_seq = 0;
  // Tokens whose logits the step returns, in order: [num_logits] indices into token_ids.
  std::vector<int32_t> logits_indices;
  // [num_seqs] the LoRA slot each sequence runs with (worker/lora_shard.h; 0: the base model).
  std::vector<int32_t> adapters;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(context_lens.size()); }
  int64_t num_logits() const { return static_cast<int64_t>(logits_indices.size()); }
};

class ForwardBatchBuilder {
 public:
  explicit ForwardBatchBuilder(int64_t block_size) : block_size_(block_size) {}

  // Appends a sequence that runs `tokens` at positions [start_position, start_position + n).
  // `block_table` lists the sequence's blocks in order and must cover every position up to the
  // last new one. With `all_logits` every new token's logits are returned, else only the last's.
  void AddSequence(absl::Span<const int32_t> tokens, int32_t start_position,
                   absl::Span<const int32_t> block_table, bool all_logits) {
    AddSequenceWithLogits(tokens, start_position, block_table,
                          all_logits ? static_cast<int64_t>(tokens.size()) : 1);
  }
  // The same, returning the logits of the last `num_logits` tokens (in [1, tokens.size()]): a
  // sequence with K draft tokens wants K + 1 rows.
  void AddSequenceWithLogits(absl::Span<const int32_t> tokens, int32_t start_position,
                             absl::Span<const int32_t> block_table, int64_t num_logits,
                             int32_t adapter = 0);

  ForwardBatch Build();

 private:
  int64_t block_size_;
  ForwardBatch batch_;
  std::vector<std::vector<int32_t>> tables_;
};

// OK when `batch` is consistent and everything it names lies inside the model and the pool:
// token ids in the vocabulary, slots and block ids in the pool, each sequence's context within the
// model's context length and covered by its block table, logits indices among the tokens.
// INVALID_ARGUMENT naming the first problem otherwise. Every backend checks a batch with it before
// touching its cache.
absl::Status ValidateForwardBatch(const ForwardBatch& batch, const ModelConfig& config,
                                  const KvCacheShape& kv);

}  // namespace tpserve
