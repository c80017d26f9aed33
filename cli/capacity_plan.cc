#include "cli/capacity_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/shard_layout.h"

namespace tpserve {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

int64_t LinearBytes(int64_t rows, int64_t cols, PlanDtype dtype) {
  // FP8: one byte a weight and an fp32 scale per output row.
  return dtype == PlanDtype::kFp8 ? rows * cols + rows * 4 : rows * cols * 2;
}

}  // namespace

absl::StatusOr<PlanResult> PlanCapacity(const ModelConfig& c, PlanDtype weights, PlanDtype kv_cache,
                                        const PlanHardware& hw, int64_t context) {
  if (hw.tp < 1) return absl::InvalidArgumentError("--tp: must be at least 1");
  if (hw.gpus_per_node < 1) return absl::InvalidArgumentError("--gpus-per-node: at least 1");
  if (context < 1) return absl::InvalidArgumentError("--context: must be at least 1");
  if (hw.block_size < 1) return absl::InvalidArgumentError("--block-size: must be at least 1");
  if (hw.pp < 1 || hw.pp > c.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pp: between 1 and the model's ", c.num_layers, " layers"));
  }
  absl::StatusOr<ShardLayout> layout = ShardLayout::Make(c, /*rank=*/0, hw.tp);
  if (!layout.ok())
    return absl::InvalidArgumentError(absl::StrCat("--tp: ", layout.status().message()));

  const int64_t h = c.hidden_size;
  const int64_t hd = c.head_dim;
  PlanResult r;
  // The whole model.
  const int64_t q = c.num_heads * hd;
  const int64_t kv = c.num_kv_heads * hd;
  const int64_t layer_params = h * (q + 2 * kv) + q * h + 3 * c.intermediate_size * h + 2 * h;
  r.params = c.num_layers * layer_params + c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2) + h;

  // A stage's tensor-parallel rank 0.
  const int64_t q0 = layout->q_width(hd);
  const int64_t kv0 = layout->kv_width(hd);
  const int64_t ffn0 = layout->ffn.size;
  const int64_t layer_bytes = LinearBytes(q0 + 2 * kv0, h, weights) + LinearBytes(h, q0, weights) +
                              2 * LinearBytes(ffn0, h, weights) + LinearBytes(h, ffn0, weights) +
                              2 * h * 2;
  const int64_t head_bytes = layout->vocab.size * h * 2;  // the lm_head rows it computes
  const int64_t embedding_bytes = c.vocab_size * h * 2;
  const int64_t kv_element = kv_cache == PlanDtype::kFp8 ? 1 : 2;
  const int world = hw.tp * hw.pp;
  r.nodes = (world + hw.gpus_per_node - 1) / hw.gpus_per_node;
  auto node = [&](int rank) { return rank / hw.gpus_per_node; };
  const double token_bytes = static_cast<double>(h) * 2;  // one token's hidden state, bf16
  auto hop = [&](bool network) {  // seconds to move `bytes` once over a link, and its latency
    const double link = (network ? hw.network_gb_per_s : hw.nvlink_gb_per_s) * 1e9;
    const double latency = (network ? hw.network_latency_us : hw.nvlink_latency_us) * 1e-6;
    return std::pair<double, double>(latency, 1.0 / link);
  };
  r.kv_blocks = -1;
  for (int stage = 0; stage < hw.pp; ++stage) {
    StagePlan& s = r.stages.emplace_back();
    ASSIGN_OR_RETURN(const ShardLayout staged,
                     ShardLayout::Make(c, /*rank=*/0, hw.tp, stage, hw.pp));
    const bool first = staged.first_stage(), last = staged.last_stage();
    s.first_layer = staged.layers.begin;
    s.layers = staged.layers.size;
    const bool embedding = staged.holds_embedding(c.tie_word_embeddings);
    s.rank_weight_bytes = s.layers * layer_bytes + (embedding ? embedding_bytes : 0) +
                          (last && !c.tie_word_embeddings ? head_bytes : 0) + (last ? h * 2 : 0);
    s.kv_bytes_per_token = 2 * s.layers * kv0 * kv_element;
    const double budget = hw.gpu_memory_gib * hw.gpu_memory_utilization * kGiB -
                          static_cast<double>(s.rank_weight_bytes) - hw.overhead_gib * kGiB;
    if (budget <= 0) {
      r.warning = hw.pp == 1 ? "the weights do not fit: more GPUs (--tp) or FP8 weights"
                             : "the weights do not fit: more GPUs (--tp, --pp) or FP8 weights";
    } else {
      s.kv_blocks =
          static_cast<int64_t>(budget / static_cast<double>(s.kv_bytes_per_token * hw.block_size));
    }
    // A token reads the stage's layers and KV; the last stage its lm_head rows, the first one
    // embedding row.
    s.decode_read_bytes = s.layers * layer_bytes + (last ? head_bytes : 0) + (first ? h * 2 : 0) +
                          context * s.kv_bytes_per_token;
    s.decode_ms = static_cast<double>(s.decode_read_bytes) / (hw.hbm_tb_per_s * 1e12) * 1e3;
    if (hw.tp > 1) {
      const int rank0 = stage * hw.tp;
      const auto [latency, per_byte] = hop(node(rank0) != node(rank0 + hw.tp - 1));
      const double each = latency + 2.0 * (hw.tp - 1) / hw.tp * token_bytes * per_byte;
      s.allreduce_ms = 2.0 * static_cast<double>(s.layers) * each * 1e3;
    }
    if (!last) {  // every pair sends at once: the slowest link decides
      bool network = false;
      for (int t = 0; t < hw.tp; ++t) {
        network = network || node(stage * hw.tp + t) != node((stage + 1) * hw.tp + t);
      }
      const auto [latency, per_byte] = hop(network);
      r.p2p_ms += (latency + token_bytes * per_byte) * 1e3;
    }
    r.rank_weight_bytes = std::max(r.rank_weight_bytes, s.rank_weight_bytes);
    r.kv_bytes_per_token = std::max(r.kv_bytes_per_token, s.kv_bytes_per_token);
    r.kv_blocks = r.kv_blocks < 0 ? s.kv_blocks : std::min(r.kv_blocks, s.kv_blocks);
    r.decode_read_bytes += s.decode_read_bytes;
    r.decode_ms += s.decode_ms;
    r.allreduce_ms += s.allreduce_ms;
  }
  r.kv_tokens = r.kv_blocks * hw.block_size;
  r.sequences = r.kv_tokens / context;
  return r;
}

}  // namespace tpserve
