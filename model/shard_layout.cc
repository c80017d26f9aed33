#include "model/shard_layout.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve {
namespace {

bool CanSplit(const ModelConfig& config, int world_size) {
  if (world_size < 1 || config.num_heads % world_size != 0) return false;
  return config.num_kv_heads % world_size == 0 || world_size % config.num_kv_heads == 0;
}

}  // namespace

Range BalancedRange(int64_t total, int rank, int world_size) {
  const int64_t begin = total * rank / world_size;
  const int64_t end = total * (rank + 1) / world_size;
  return {begin, end - begin};
}

std::string ValidTensorParallelSizes(const ModelConfig& config) {
  std::vector<int> sizes;
  for (int t = 1; t <= config.num_heads; ++t) {
    if (CanSplit(config, t)) sizes.push_back(t);
  }
  return absl::StrJoin(sizes, ", ");
}

absl::StatusOr<ShardLayout> ShardLayout::Make(const ModelConfig& config, int rank, int world_size,
                                              int stage, int num_stages) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside a tensor-parallel world of ", world_size));
  }
  if (num_stages < 1 || num_stages > config.num_layers || stage < 0 || stage >= num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline stage ", stage, " of ", num_stages, ": this model's ",
                     config.num_layers, " layers make 1 to ", config.num_layers, " stages"));
  }
  if (!CanSplit(config, world_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor-parallel size ", world_size, " cannot split this model's ", config.num_heads,
        " attention heads and ", config.num_kv_heads,
        " KV heads (it must divide the heads, and divide or be a multiple of the KV heads); "
        "valid sizes: ",
        ValidTensorParallelSizes(config)));
  }
  ShardLayout layout;
  layout.rank = rank;
  layout.world_size = world_size;
  const int64_t q_per_rank = config.num_heads / world_size;
  layout.q_heads = {rank * q_per_rank, q_per_rank};
  if (world_size <= config.num_kv_heads) {
    const int64_t kv_per_rank = config.num_kv_heads / world_size;
    layout.kv_heads = {rank * kv_per_rank, kv_per_rank};
  } else {
    // Each query group lives on one rank; that rank holds a copy of the group's KV head.
    const int64_t group = config.num_heads / config.num_kv_heads;
    layout.kv_heads = {layout.q_heads.begin / group, 1};
  }
  layout.ffn = BalancedRange(config.intermediate_size, rank, world_size);
  layout.vocab = BalancedRange(config.vocab_size, rank, world_size);
  layout.stage = stage;
  layout.num_stages = num_stages;
  layout.layers = BalancedRange(config.num_layers, stage, num_stages);
  return layout;
}

std::vector<int64_t> VocabGatherCounts(int64_t vocab_size, int world_size, int64_t rows) {
  std::vector<int64_t> counts(world_size);
  for (int r = 0; r < world_size; ++r) {
    counts[r] = rows * BalancedRange(vocab_size, r, world_size).size;
  }
  return counts;
}

}  // namespace tpserve
