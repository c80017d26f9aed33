// Which slice of every layer a tensor-parallel rank owns (Megatron-style, see DESIGN.md):
// attention by whole heads, the MLP by a balanced range of the intermediate dimension, the
// lm_head by a balanced range of the vocabulary; and, with pipeline parallelism, which layers its
// stage runs: a balanced range of them (sizes differ by at most one), the embedding on the first
// stage, the final norm and lm_head on the last.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_config.h"

namespace tpserve {

struct Range {
  int64_t begin = 0;
  int64_t size = 0;
  int64_t end() const { return begin + size; }
};

struct ShardLayout {
  int rank = 0;
  int world_size = 1;
  Range q_heads;   // query heads owned
  Range kv_heads;  // KV heads owned; replicated across ranks when world_size > num_kv_heads
  Range ffn;       // columns of gate/up, rows of down
  Range vocab;     // lm_head rows
  int stage = 0;   // pipeline stage, of num_stages
  int num_stages = 1;
  Range layers;  // the layers this stage runs

  bool first_stage() const { return stage == 0; }
  bool last_stage() const { return stage == num_stages - 1; }
  // The embedding looks up the first stage's inputs and, tied, is the last stage's lm_head.
  bool holds_embedding(bool tied_embeddings) const {
    return first_stage() || (last_stage() && tied_embeddings);
  }

  // Widths of this rank's attention rows for heads of `head_dim`: Q, K (and V), fused QKV.
  int64_t q_width(int64_t head_dim) const { return q_heads.size * head_dim; }
  int64_t kv_width(int64_t head_dim) const { return kv_heads.size * head_dim; }
  int64_t qkv_width(int64_t head_dim) const { return q_width(head_dim) + 2 * kv_width(head_dim); }

  // `rank` and `world_size` are the tensor-parallel rank and size within the stage.
  // INVALID_ARGUMENT naming the head counts and the valid sizes when `world_size` cannot split
  // the model's heads, or the layer count when there are more stages than layers.
  static absl::StatusOr<ShardLayout> Make(const ModelConfig& config, int rank, int world_size,
                                          int stage = 0, int num_stages = 1);
};

// The tensor-parallel sizes that can split `config`: divisors of the head count that either
// divide the KV head count or are a multiple of it. "1, 3, 9" for SmolLM2-135M.
std::string ValidTensorParallelSizes(const ModelConfig& config);

// The balanced share of `total` items for `rank` of `world_size`: sizes differ by at most one.
Range BalancedRange(int64_t total, int rank, int world_size);

// The floats each rank sends when `rows` rows of its vocabulary slice of the logits are gathered
// on rank 0 (Communicator::GatherToRoot): rows × that rank's vocabulary share, by rank.
std::vector<int64_t> VocabGatherCounts(int64_t vocab_size, int world_size, int64_t rows);

}  // namespace tpserve
