#include "worker/llama_model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/silu_mul.h"

namespace tpserve {

LlamaModel::LlamaModel(const ModelConfig& config, const ShardLayout& layout, ModelWeights weights,
                       Communicator* comm, const KvCacheShape& kv_shape)
    : config_(config),
      layout_(layout),
      weights_(std::move(weights)),
      comm_(comm),
      kv_cache_(kv_shape) {
  TP_CHECK(comm_->rank() == layout_.rank && comm_->world_size() == layout_.world_size);
  TP_CHECK(kv_shape.num_layers == config_.num_layers);
  TP_CHECK(kv_shape.num_kv_heads == layout_.kv_heads.size);
  TP_CHECK(kv_shape.head_dim == config_.head_dim);
}

absl::Status LlamaModel::Forward(const ForwardBatch& batch, std::vector<float>* logits) {
  RETURN_IF_ERROR(ValidateForwardBatch(batch, config_, kv_cache_.shape()));
  const int64_t n = batch.num_tokens();
  const int64_t hidden = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  std::vector<float> residual(n * hidden);  // [n, hidden]
  std::vector<float> normed(n * hidden);    // [n, hidden]
  std::vector<float> partial(n * hidden);   // [n, hidden], this rank's share before all-reduce
  LookupRows(weights_.token_embedding, batch.token_ids.data(), n, residual.data());
  for (int layer = 0; layer < config_.num_layers; ++layer) {
    const LayerWeights& w = weights_.layers[layer];
    cpu::RmsNorm(residual.data(), w.attn_norm.data(), n, hidden, eps, normed.data());
    Attention(layer, batch, normed.data(), partial.data());
    RETURN_IF_ERROR(comm_->AllReduceSum(partial.data(), n * hidden));
    for (int64_t i = 0; i < n * hidden; ++i) residual[i] += partial[i];
    cpu::RmsNorm(residual.data(), w.ffn_norm.data(), n, hidden, eps, normed.data());
    Mlp(layer, normed.data(), n, partial.data());
    RETURN_IF_ERROR(comm_->AllReduceSum(partial.data(), n * hidden));
    for (int64_t i = 0; i < n * hidden; ++i) residual[i] += partial[i];
  }
  return Logits(batch, residual.data(), logits);
}

void LlamaModel::Attention(int layer, const ForwardBatch& batch, const float* normed, float* out) {
  const LayerWeights& w = weights_.layers[layer];
  const int64_t n = batch.num_tokens();
  const int64_t hidden = config_.hidden_size;
  const int64_t head_dim = config_.head_dim;
  const int64_t q_heads = layout_.q_heads.size;
  const int64_t kv_heads = layout_.kv_heads.size;
  const int64_t q_width = layout_.q_width(head_dim);
  const int64_t kv_width = layout_.kv_width(head_dim);
  const int64_t qkv_width = layout_.qkv_width(head_dim);

  std::vector<float> qkv(n * qkv_width);  // [n, q | k | v]
  TP_CHECK(w.qkv.rows == qkv_width && w.qkv.cols == hidden);
  ApplyLinear(w.qkv, normed, n, qkv.data());
  std::vector<float> q(n * q_width);   // [n, q_heads, head_dim]
  std::vector<float> k(n * kv_width);  // [n, kv_heads, head_dim]
  std::vector<float> v(n * kv_width);  // [n, kv_heads, head_dim]
  for (int64_t t = 0; t < n; ++t) {
    const float* row = qkv.data() + t * qkv_width;
    std::copy(row, row + q_width, q.data() + t * q_width);
    std::copy(row + q_width, row + q_width + kv_width, k.data() + t * kv_width);
    std::copy(row + q_width + kv_width, row + qkv_width, v.data() + t * kv_width);
  }
  const float theta = static_cast<float>(config_.rope_theta);
  cpu::ApplyRope(q.data(), batch.positions.data(), n, q_heads, head_dim, config_.rope_dims, theta,
                 cpu::RopeStyle::kAdjacentPairs);
  cpu::ApplyRope(k.data(), batch.positions.data(), n, kv_heads, head_dim, config_.rope_dims, theta,
                 cpu::RopeStyle::kAdjacentPairs);
  cpu::WriteKvCache(k.data(), v.data(), batch.slot_mapping.data(), n, kv_heads, head_dim,
                    kv_cache_.keys(layer), kv_cache_.values(layer));

  std::vector<float> attn(n * q_width);  // [n, q_heads, head_dim]
  cpu::PagedAttentionParams params;
  params.q = q.data();
  params.k_cache = kv_cache_.keys(layer);
  params.v_cache = kv_cache_.values(layer);
  params.num_seqs = batch.num_seqs();
  params.query_start = batch.query_start.data();
  params.context_lens = batch.context_lens.data();
  params.block_tables = batch.block_tables.data();
  params.max_blocks_per_seq = batch.max_blocks_per_seq;
  params.num_heads = q_heads;
  params.num_kv_heads = kv_heads;
  params.head_dim = head_dim;
  params.block_size = kv_cache_.shape().block_size;
  params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  params.out = attn.data();
  cpu::PagedAttention(params);
  ApplyLinear(w.attn_output, attn.data(), n, out);
}

void LlamaModel::Mlp(int layer, const float* normed, int64_t num_tokens, float* out) {
  const LayerWeights& w = weights_.layers[layer];
  const int64_t ffn = layout_.ffn.size;
  std::vector<float> gate_up(num_tokens * 2 * ffn);  // [n, gate | up]
  ApplyLinear(w.gate_up, normed, num_tokens, gate_up.data());
  std::vector<float> act(num_tokens * ffn);  // [n, ffn_local]
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = gate_up.data() + t * 2 * ffn;
    cpu::SiluMul(row, row + ffn, ffn, act.data() + t * ffn);
  }
  ApplyLinear(w.down, act.data(), num_tokens, out);
}

absl::Status LlamaModel::Logits(const ForwardBatch& batch, const float* hidden_states,
                                std::vector<float>* logits) {
  const int64_t hidden = config_.hidden_size;
  const int64_t m = batch.num_logits();
  std::vector<float> selected(m * hidden);  // [m, hidden]
  for (int64_t i = 0; i < m; ++i) {
    const float* row = hidden_states + int64_t{batch.logits_indices[i]} * hidden;
    std::copy(row, row + hidden, selected.data() + i * hidden);
  }
  std::vector<float> normed(m * hidden);
  cpu::RmsNorm(selected.data(), weights_.output_norm.data(), m, hidden,
               static_cast<float>(config_.rms_norm_eps), normed.data());
  const int64_t local_vocab = layout_.vocab.size;
  std::vector<float> local(m * local_vocab);  // [m, vocab_local]
  if (weights_.lm_head.rows == 0) {  // tied: this rank's vocabulary rows of the embedding
    ApplyLinearRows(weights_.token_embedding, layout_.vocab, normed.data(), m, local.data());
  } else {
    ApplyLinear(weights_.lm_head, normed.data(), m, local.data());
  }

  const int world = layout_.world_size;
  const int64_t vocab = config_.vocab_size;
  const std::vector<int64_t> counts = VocabGatherCounts(vocab, world, m);
  std::vector<float> gathered(layout_.rank == 0 ? m * vocab : 0);  // rank chunks [m, vocab_r]
  RETURN_IF_ERROR(comm_->GatherToRoot(local.data(), counts, gathered.data()));
  logits->clear();
  if (layout_.rank != 0) return absl::OkStatus();
  logits->resize(m * vocab);
  const float* chunk = gathered.data();
  for (int r = 0; r < world; ++r) {
    const Range range = BalancedRange(vocab, r, world);
    for (int64_t i = 0; i < m; ++i) {
      std::copy(chunk + i * range.size, chunk + (i + 1) * range.size,
                logits->data() + i * vocab + range.begin);
    }
    chunk += m * range.size;
  }
  return absl::OkStatus();
}

}  // namespace tpserve
