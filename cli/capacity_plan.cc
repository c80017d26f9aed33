#include "cli/capacity_plan.h"

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

  // Rank 0.
  const int64_t q0 = layout->q_width(hd);
  const int64_t kv0 = layout->kv_width(hd);
  const int64_t ffn0 = layout->ffn.size;
  const int64_t layer_bytes = LinearBytes(q0 + 2 * kv0, h, weights) + LinearBytes(h, q0, weights) +
                              2 * LinearBytes(ffn0, h, weights) + LinearBytes(h, ffn0, weights) +
                              2 * h * 2;
  const int64_t head_bytes = layout->vocab.size * h * 2;  // the lm_head rows it computes
  const int64_t embedding_bytes = c.vocab_size * h * 2;
  r.rank_weight_bytes = c.num_layers * layer_bytes + embedding_bytes +
                        (c.tie_word_embeddings ? 0 : head_bytes) + h * 2;

  const int64_t kv_element = kv_cache == PlanDtype::kFp8 ? 1 : 2;
  r.kv_bytes_per_token = 2 * c.num_layers * kv0 * kv_element;
  const double budget = hw.gpu_memory_gib * hw.gpu_memory_utilization * kGiB -
                        static_cast<double>(r.rank_weight_bytes) - hw.overhead_gib * kGiB;
  if (budget <= 0) {
    r.warning = "the weights do not fit: more GPUs (--tp) or FP8 weights";
  } else {
    r.kv_blocks =
        static_cast<int64_t>(budget / static_cast<double>(r.kv_bytes_per_token * hw.block_size));
  }
  r.kv_tokens = r.kv_blocks * hw.block_size;
  r.sequences = r.kv_tokens / context;

  r.decode_read_bytes =
      c.num_layers * layer_bytes + head_bytes + h * 2 + context * r.kv_bytes_per_token;
  r.decode_ms = static_cast<double>(r.decode_read_bytes) / (hw.hbm_tb_per_s * 1e12) * 1e3;

  r.nodes = (hw.tp + hw.gpus_per_node - 1) / hw.gpus_per_node;
  if (hw.tp > 1) {
    const bool network = r.nodes > 1;
    const double bytes = static_cast<double>(h) * 2;  // one token's hidden state, bf16
    const double link = (network ? hw.network_gb_per_s : hw.nvlink_gb_per_s) * 1e9;
    const double latency = (network ? hw.network_latency_us : hw.nvlink_latency_us) * 1e-6;
    const double each = latency + 2.0 * (hw.tp - 1) / hw.tp * bytes / link;
    r.allreduce_ms = 2.0 * static_cast<double>(c.num_layers) * each * 1e3;
  }
  return r;
}

}  // namespace tpserve
