#include "worker/cpu_forward_pass.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "kernels/cpu/add_bias.h"
#include "kernels/cpu/gelu_tanh_mul.h"
#include "kernels/cpu/lora_product.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/silu_mul.h"
#include "kernels/cpu/vector_ops.h"

namespace tpserve {
namespace {

// SiLU rows per ParallelFor chunk: a row is ffn_local elements.
constexpr int64_t kActivationRowsPerChunk = 4;

// `v` grown to at least n floats (never shrunk, so steady-state steps allocate nothing).
float* Sized(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

}  // namespace

CpuForwardPass::CpuForwardPass(const ModelConfig& config, const ShardLayout& layout,
                               ModelWeights weights, Communicator* comm, PipelineLinks* links,
                               const KvCacheShape& kv_shape)
    : config_(config),
      layout_(layout),
      weights_(std::move(weights)),
      comm_(comm),
      links_(links),
      kv_cache_(kv_shape) {
  TP_CHECK(comm_->rank() == layout_.rank && comm_->world_size() == layout_.world_size);
  TP_CHECK(layout_.num_stages == 1 || links_ != nullptr);
  TP_CHECK(kv_shape.num_layers == layout_.layers.size &&
           static_cast<int64_t>(weights_.layers.size()) == layout_.layers.size);
  TP_CHECK(kv_shape.num_kv_heads == layout_.kv_heads.size);
  TP_CHECK(kv_shape.head_dim == config_.head_dim);
  TP_CHECK(static_cast<int64_t>(weights_.rope_inv_freq.size()) == config_.rope_dims / 2);
  TP_CHECK(config_.local_layer_period == 0 ||
           static_cast<int64_t>(weights_.rope_inv_freq_local.size()) == config_.rope_dims / 2);
  for (const LayerWeights& w : weights_.layers) {
    TP_CHECK(static_cast<int64_t>(w.k_cache_scales.size()) == layout_.kv_heads.size &&
             static_cast<int64_t>(w.v_cache_scales.size()) == layout_.kv_heads.size);
  }
}

void CpuForwardPass::AddLora(int layer, std::vector<LoraSlice> LoraLayerShard::*which,
                             const float* x, int64_t x_stride, float* y, int64_t y_stride) const {
  if (loras_step_.groups.empty()) return;
  cpu::ParallelFor(static_cast<int64_t>(loras_step_.groups.size()), 1,
                   [&](int64_t begin, int64_t end) {
                     const float* in[cpu::kMaxLoraProductTokens];
                     float* out[cpu::kMaxLoraProductTokens];
                     for (int64_t g = begin; g < end; ++g) {
                       const LoraTokenGroup& group = loras_step_.groups[g];
                       for (int i = 0; i < group.count; ++i) {
                         in[i] = x + group.tokens[i] * x_stride;
                         out[i] = y + group.tokens[i] * y_stride;
                       }
                       for (const LoraSlice& slice : loras_step_.shards[g]->layers[layer].*which) {
                         ApplyLora(slice, in, out, group.count);
                       }
                     }
                   });
}

absl::Status CpuForwardPass::Forward(const ForwardBatch& batch, std::vector<float>* logits) {
  RETURN_IF_ERROR(ValidateForwardBatch(batch, config_, kv_cache_.shape()));
  ASSIGN_OR_RETURN(loras_step_, TakeStepLoras(batch, loras_));
  const int64_t n = batch.num_tokens();
  const int64_t hidden = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  float* residual = Sized(buffers_.residual, n * hidden);  // [n, hidden]
  float* normed = Sized(buffers_.normed, n * hidden);      // [n, hidden]
  float* partial = Sized(buffers_.partial, n * hidden);    // this rank's share before all-reduce
  if (layout_.first_stage()) {
    LookupRows(weights_.token_embedding, batch.token_ids.data(), n, residual);
    if (config_.embedding_scale != 1.0f) {  // Gemma
      cpu::Scale(config_.embedding_scale, residual, residual, n * hidden);
    }
  } else {
    RETURN_IF_ERROR(links_->Receive(residual, n * hidden));
  }
  for (int layer = 0; layer < layout_.layers.size; ++layer) {  // this stage's, from 0
    const LayerWeights& w = weights_.layers[layer];
    cpu::RmsNorm(residual, w.attn_norm.data(), n, hidden, eps, normed);
    Attention(layer, batch, normed, partial);
    RETURN_IF_ERROR(comm_->AllReduceSum(partial, n * hidden));
    if (!w.post_attention_norm.empty()) {  // Gemma 3: normed before it joins the residual
      cpu::RmsNorm(partial, w.post_attention_norm.data(), n, hidden, eps, partial);
    }
    for (int64_t i = 0; i < n * hidden; ++i) residual[i] += partial[i];
    cpu::RmsNorm(residual, w.ffn_norm.data(), n, hidden, eps, normed);
    Mlp(layer, normed, n, partial);
    RETURN_IF_ERROR(comm_->AllReduceSum(partial, n * hidden));
    if (!w.post_ffw_norm.empty()) {
      cpu::RmsNorm(partial, w.post_ffw_norm.data(), n, hidden, eps, partial);
    }
    for (int64_t i = 0; i < n * hidden; ++i) residual[i] += partial[i];
  }
  if (!layout_.last_stage()) {
    logits->clear();
    return links_->Send(residual, n * hidden);
  }
  return Logits(batch, residual, logits);
}

void CpuForwardPass::Attention(int layer, const ForwardBatch& batch, const float* normed,
                               float* out) {
  const LayerWeights& w = weights_.layers[layer];
  const int64_t n = batch.num_tokens();
  const int64_t hidden = config_.hidden_size;
  const int64_t head_dim = config_.head_dim;
  const int64_t q_heads = layout_.q_heads.size;
  const int64_t kv_heads = layout_.kv_heads.size;
  const int64_t q_width = layout_.q_width(head_dim);
  const int64_t kv_width = layout_.kv_width(head_dim);
  const int64_t qkv_width = layout_.qkv_width(head_dim);

  float* qkv = Sized(buffers_.qkv, n * qkv_width);  // [n, q | k | v]
  TP_CHECK(w.qkv.rows == qkv_width && w.qkv.cols == hidden);
  ApplyLinear(w.qkv, normed, n, qkv);
  AddLora(layer, &LoraLayerShard::qkv, normed, hidden, qkv, qkv_width);
  if (!w.qkv_bias.empty()) cpu::AddBias(qkv, w.qkv_bias.data(), n, qkv_width);
  float* q = Sized(buffers_.q, n * q_width);   // [n, q_heads, head_dim]
  float* k = Sized(buffers_.k, n * kv_width);  // [n, kv_heads, head_dim]
  float* v = Sized(buffers_.v, n * kv_width);  // [n, kv_heads, head_dim]
  for (int64_t t = 0; t < n; ++t) {
    const float* row = qkv + t * qkv_width;
    std::copy(row, row + q_width, q + t * q_width);
    std::copy(row + q_width, row + q_width + kv_width, k + t * kv_width);
    std::copy(row + q_width + kv_width, row + qkv_width, v + t * kv_width);
  }
  if (!w.q_norm.empty()) {  // Qwen3: each head normalized on its own, before RoPE
    const float eps = static_cast<float>(config_.rms_norm_eps);
    cpu::RmsNorm(q, w.q_norm.data(), n * q_heads, head_dim, eps, q);
    cpu::RmsNorm(k, w.k_norm.data(), n * kv_heads, head_dim, eps, k);
  }
  const double* inv_freq = weights_.RopeTable(config_, layout_.layers.begin + layer).data();
  const cpu::RopeStyle style =
      config_.rope_rotate_half ? cpu::RopeStyle::kRotateHalf : cpu::RopeStyle::kAdjacentPairs;
  cpu::ApplyRope(q, batch.positions.data(), n, q_heads, head_dim, config_.rope_dims, inv_freq,
                 style);
  cpu::ApplyRope(k, batch.positions.data(), n, kv_heads, head_dim, config_.rope_dims, inv_freq,
                 style);
  if (kv_observer_) kv_observer_(layer, k, v, n);
  const KvCacheShape& kv = kv_cache_.shape();
  if (kv.fp8) {
    cpu::WriteKvCacheFp8(k, v, batch.slot_mapping.data(), n, kv_heads, head_dim,
                         w.k_cache_scales.data(), w.v_cache_scales.data(),
                         kv_cache_.fp8_keys(layer), kv_cache_.fp8_values(layer));
  } else {
    cpu::WriteKvCache(k, v, batch.slot_mapping.data(), n, kv_heads, head_dim, kv_cache_.keys(layer),
                      kv_cache_.values(layer));
  }

  float* attn = Sized(buffers_.attn, n * q_width);  // [n, q_heads, head_dim]
  cpu::PagedAttentionParams params;
  params.q = q;
  params.k_cache = kv_cache_.keys(layer);
  params.v_cache = kv_cache_.values(layer);
  params.k_cache_fp8 = kv_cache_.fp8_keys(layer);
  params.v_cache_fp8 = kv_cache_.fp8_values(layer);
  params.k_scales = w.k_cache_scales.data();
  params.v_scales = w.v_cache_scales.data();
  params.num_seqs = batch.num_seqs();
  params.query_start = batch.query_start.data();
  params.context_lens = batch.context_lens.data();
  params.block_tables = batch.block_tables.data();
  params.max_blocks_per_seq = batch.max_blocks_per_seq;
  params.num_heads = q_heads;
  params.num_kv_heads = kv_heads;
  params.head_dim = head_dim;
  params.block_size = kv_cache_.shape().block_size;
  params.scale = config_.AttentionScale();
  params.window = config_.AttentionWindow(layout_.layers.begin + layer);
  params.out = attn;
  cpu::PagedAttention(params);
  ApplyLinear(w.attn_output, attn, n, out);
  AddLora(layer, &LoraLayerShard::o, attn, q_width, out, hidden);
}

void CpuForwardPass::Mlp(int layer, const float* normed, int64_t num_tokens, float* out) {
  const LayerWeights& w = weights_.layers[layer];
  const int64_t ffn = layout_.ffn.size;
  float* gate_up = Sized(buffers_.gate_up, num_tokens * 2 * ffn);  // [n, gate | up]
  ApplyLinear(w.gate_up, normed, num_tokens, gate_up);
  AddLora(layer, &LoraLayerShard::gate_up, normed, config_.hidden_size, gate_up, 2 * ffn);
  float* act = Sized(buffers_.act, num_tokens * ffn);  // [n, ffn_local]
  const bool gelu = config_.ffn_activation == FfnActivation::kGeluTanh;
  cpu::ParallelFor(num_tokens, kActivationRowsPerChunk, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* row = gate_up + t * 2 * ffn;
      if (gelu) {
        cpu::GeluTanhMul(row, row + ffn, ffn, act + t * ffn);
      } else {
        cpu::SiluMul(row, row + ffn, ffn, act + t * ffn);
      }
    }
  });
  ApplyLinear(w.down, act, num_tokens, out);
  AddLora(layer, &LoraLayerShard::down, act, ffn, out, config_.hidden_size);
}

absl::Status CpuForwardPass::Logits(const ForwardBatch& batch, const float* hidden_states,
                                    std::vector<float>* logits) {
  const int64_t hidden = config_.hidden_size;
  const int64_t m = batch.num_logits();
  float* selected = Sized(buffers_.selected, m * hidden);  // [m, hidden]
  for (int64_t i = 0; i < m; ++i) {
    const float* row = hidden_states + int64_t{batch.logits_indices[i]} * hidden;
    std::copy(row, row + hidden, selected + i * hidden);
  }
  float* normed = Sized(buffers_.normed, m * hidden);
  cpu::RmsNorm(selected, weights_.output_norm.data(), m, hidden,
               static_cast<float>(config_.rms_norm_eps), normed);
  const int world = layout_.world_size;
  const int64_t vocab = config_.vocab_size;
  const int64_t local_vocab = layout_.vocab.size;
  // One rank writes its logits in place: no gather, and a resize to the size of the last step
  // fills nothing.
  if (world == 1) logits->resize(m * vocab);
  float* local = world == 1 ? logits->data() : Sized(buffers_.local, m * local_vocab);
  if (weights_.lm_head.rows == 0) {  // tied: this rank's vocabulary rows of the embedding
    ApplyLinearRows(weights_.token_embedding, layout_.vocab, normed, m, local);
  } else {
    ApplyLinear(weights_.lm_head, normed, m, local);
  }
  if (world == 1) return absl::OkStatus();

  const std::vector<int64_t> counts = VocabGatherCounts(vocab, world, m);
  float* gathered = layout_.rank == 0 ? Sized(buffers_.gathered, m * vocab) : nullptr;
  RETURN_IF_ERROR(comm_->GatherToRoot(local, counts, gathered));
  if (layout_.rank != 0) {
    logits->clear();
    return absl::OkStatus();
  }
  logits->resize(m * vocab);
  const float* chunk = gathered;
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
