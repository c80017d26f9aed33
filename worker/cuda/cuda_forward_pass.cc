#include "worker/cuda/cuda_forward_pass.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/cuda/add_bias.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/fp8_quantize.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/qkv_rope_kv_write.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/silu_mul.h"
#include "worker/decode_buckets.h"

namespace tpserve::cuda {
namespace {

constexpr char kLog[] = "cuda";
// The loader and the layout must agree before any product runs over these sizes.
absl::Status CheckShapes(const ModelConfig& config, const ShardLayout& layout,
                         const ModelWeights& weights, const DeviceCommunicator& comm) {
  if (comm.rank() != layout.rank || comm.world_size() != layout.world_size) {
    return absl::InternalError(absl::StrCat("CUDA model: communicator rank ", comm.rank(), "/",
                                            comm.world_size(), " differs from the layout's ",
                                            layout.rank, "/", layout.world_size));
  }
  const int64_t hidden = config.hidden_size;
  const int64_t q_width = layout.q_width(config.head_dim);
  for (size_t i = 0; i < weights.layers.size(); ++i) {
    const LayerWeights& w = weights.layers[i];
    const bool ok = w.qkv.rows == layout.qkv_width(config.head_dim) && w.qkv.cols == hidden &&
                    (w.qkv_bias.empty() || static_cast<int64_t>(w.qkv_bias.size()) == w.qkv.rows) &&
                    w.attn_output.rows == hidden && w.attn_output.cols == q_width &&
                    w.gate_up.rows == 2 * layout.ffn.size && w.gate_up.cols == hidden &&
                    w.down.rows == hidden && w.down.cols == layout.ffn.size &&
                    static_cast<int64_t>(w.k_cache_scales.size()) == layout.kv_heads.size &&
                    static_cast<int64_t>(w.v_cache_scales.size()) == layout.kv_heads.size;
    if (!ok) {
      return absl::InternalError(
          absl::StrCat("CUDA model: layer ", i, "'s weight shapes do not match the layout"));
    }
  }
  if (static_cast<int64_t>(weights.rope_inv_freq.size()) != config.rope_dims / 2 ||
      (config.local_layer_period > 0 &&
       static_cast<int64_t>(weights.rope_inv_freq_local.size()) != config.rope_dims / 2)) {
    return absl::InternalError("CUDA model: the RoPE frequency table does not match rope_dims");
  }
  // A pipeline stage holds the embedding where it looks tokens up or is the tied lm_head.
  const int64_t embedding = weights.token_embedding.rows;
  const bool head_ok = !layout.last_stage() || weights.lm_head.rows == layout.vocab.size ||
                       (weights.lm_head.rows == 0 && embedding == config.vocab_size);
  if (static_cast<int64_t>(weights.layers.size()) != layout.layers.size ||
      (embedding != config.vocab_size && (embedding != 0 || layout.first_stage())) || !head_ok) {
    return absl::InternalError("CUDA model: embedding or lm_head shapes do not match the layout");
  }
  return absl::OkStatus();
}

}  // namespace

CudaForwardPass::CudaForwardPass(const ModelConfig& config, const ShardLayout& layout,
                                 DeviceCommunicator* comm, const CudaRunnerOptions& options,
                                 CudaStream stream)
    : config_(config),
      layout_(layout),
      comm_(comm),
      options_(options),
      stream_(std::move(stream)),
      // A padded decode graph runs up to max_num_seqs tokens, whatever the token budget.
      token_capacity_(std::max(options.max_num_batched_tokens, options.max_num_seqs)) {}

absl::StatusOr<std::unique_ptr<CudaForwardPass>> CudaForwardPass::Create(
    const ModelRunnerOptions& options, const CudaDeviceChoice& device, const ModelConfig& config,
    const ShardLayout& layout, ModelWeights weights, DeviceCommunicator* comm) {
  const CudaRunnerOptions& cuda = options.cuda;
  if (cuda.max_num_seqs <= 0 || cuda.max_num_batched_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA model: max_num_seqs (", cuda.max_num_seqs, ") and max_num_batched_tokens (",
        cuda.max_num_batched_tokens, ") must be positive"));
  }
  RETURN_IF_ERROR(CheckShapes(config, layout, weights, *comm));
  RETURN_IF_ERROR(PagedAttentionSupported(layout.q_heads.size, layout.kv_heads.size,
                                          config.head_dim, options.block_size));
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device.ordinal),
                             absl::StrCat("cudaSetDevice(", device.ordinal, ")")));
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  CudaRunnerOptions resolved = cuda;
  resolved.device = device.ordinal;
  std::unique_ptr<CudaForwardPass> model(
      new CudaForwardPass(config, layout, comm, resolved, std::move(stream)));
  model->device_name_ = device.name;
  if (layout.num_stages > 1) {
    // The links' device side: a two-rank NCCL group each, this rank the receiver (0) of the link
    // from the previous stage and the sender (1) of the one to the next.
    model->from_previous_ =
        options.links == nullptr ? nullptr : options.links->device_from_previous();
    model->to_next_ = options.links == nullptr ? nullptr : options.links->device_to_next();
    if ((!layout.first_stage() && model->from_previous_ == nullptr) ||
        (!layout.last_stage() && model->to_next_ == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat("CUDA model: pipeline stage ", layout.stage,
                                                     " needs NCCL links to its neighbours"));
    }
  }
  model->kv_shape_ = KvCacheShape::For(layout.layers.size, layout.kv_heads.size, config.head_dim,
                                       options.block_size, /*cuda=*/true, options.kv_cache_fp8);
  ASSIGN_OR_RETURN(model->gemm_, Gemm::Create());
  ASSIGN_OR_RETURN(model->weights_,
                   UploadWeights(std::move(weights), options.weights_fp8, model->stream_.get()));
  // An FP8 checkpoint computes in FP8 with or without --quantization fp8, as vLLM serves one.
  const bool fp8_checkpoint = std::any_of(
      model->weights_.layers.begin(), model->weights_.layers.end(),
      [](const DeviceLayerWeights& l) {
        return l.qkv.is_fp8() || l.attn_output.is_fp8() || l.gate_up.is_fp8() || l.down.is_fp8();
      });
  if (options.weights_fp8 || fp8_checkpoint) {
    RETURN_IF_ERROR(
        model->ChooseFp8Mode(options.weights_fp8 ? "--quantization fp8" : "this FP8 checkpoint"));
  }
  RETURN_IF_ERROR(model->AllocateStepBuffers());
  if (options.max_loras > 0) {
    ASSIGN_OR_RETURN(model->lora_pool_,
                     CudaLoraPool::Create(config, layout, options.max_loras, options.max_lora_rank,
                                          model->token_capacity_));
    LogInfo(kLog, "rank %d/%d: LoRA pool of %d adapters of rank up to %lld (%.1f MiB)",
            comm->rank(), comm->world_size(), options.max_loras,
            static_cast<long long>(options.max_lora_rank), model->lora_pool_->bytes() / 1048576.0);
  }
  RETURN_IF_ERROR(model->WarmUpCollectives());
  RETURN_IF_ERROR(model->AllocateKvPool(options));
  LogInfo(kLog, "rank %d/%d on %s: weights %.1f MiB, KV pool %lld blocks (%.1f MiB, %s)",
          comm->rank(), comm->world_size(), model->device_name_,
          model->weights_.bytes() / 1048576.0, static_cast<long long>(model->kv_shape_.num_blocks),
          model->kv_pool_.bytes() / 1048576.0, model->kv_shape_.fp8 ? "FP8 E4M3" : "bf16");
  if (cuda.enforce_eager) return model;
  if (layout.num_stages > 1) {
    LogInfo(kLog, "rank %d of stage %d: decode steps run eagerly (no graphs across stages)",
            layout.rank, layout.stage);
    return model;
  }
  RETURN_IF_ERROR(model->CaptureDecodeGraphs());
  return model;
}

absl::Status CudaForwardPass::ChooseFp8Mode(absl::string_view why) {
  const int64_t hidden = config_.hidden_size;
  const int64_t q_width = layout_.q_width(config_.head_dim);
  const int64_t ffn = layout_.ffn.size;
  // The products of a layer: qkv, o_proj, gate_up, down.
  const std::pair<int64_t, int64_t> shapes[] = {{layout_.qkv_width(config_.head_dim), hidden},
                                                {hidden, q_width},
                                                {2 * ffn, hidden},
                                                {hidden, ffn}};
  fp8_mode_ = Fp8ScaleMode::kOuterVector;
  for (const auto& [n, k] : shapes) {
    absl::StatusOr<Fp8ScaleMode> mode = gemm_->ChooseFp8Mode(n, k, token_capacity_);
    if (!mode.ok()) {
      return absl::Status(mode.status().code(), absl::StrCat(why, ": ", mode.status().message()));
    }
    if (*mode == Fp8ScaleMode::kEpilogue) fp8_mode_ = Fp8ScaleMode::kEpilogue;
  }
  LogInfo(kLog,
          "rank %d/%d: FP8 W8A8 linears, per-channel weight and per-token activation "
          "scales applied %s",
          layout_.rank, layout_.world_size,
          *fp8_mode_ == Fp8ScaleMode::kOuterVector
              ? "by cuBLASLt (outer-vector scale mode)"
              : "by an epilogue kernel (this cuBLASLt has no outer-vector FP8 scaling here)");
  return absl::OkStatus();
}

absl::Status CudaForwardPass::Linear(const DeviceLinear& w, const bf16* x, int64_t m, bf16* out) {
  const cudaStream_t stream = stream_.get();
  const int64_t k = w.cols;
  if (!w.is_fp8()) return gemm_->MatmulBT(x, w.weight.data(), m, w.rows, k, out, stream);
  QuantizeRowsE4m3(x, m, k, act_codes_.data(), act_scales_.data(), stream);
  Fp8GemmParams p;
  p.a = act_codes_.data();
  p.a_scales = act_scales_.data();
  p.b = w.fp8.data();
  p.b_scales = w.fp8_scales.data();
  p.c = out;
  p.m = m;
  p.n = w.rows;
  p.k = k;
  p.scratch = fp8_raw_.data();
  return gemm_->RunFp8(p, *fp8_mode_, stream);
}

absl::Status CudaForwardPass::CaptureDecodeGraphs() {
  for (int64_t batch : DecodeBuckets(options_.max_num_seqs)) {
    // A padding-only batch: real kernels on valid addresses, no KV written.
    const PackedStep packed = PackStep(ForwardBatch{}, blocks_per_seq_, heads(), batch);
    const StepArrays arrays = ArraysFor(packed.layout);
    auto enqueue = [&]() -> absl::Status {
      RETURN_IF_ERROR(EnqueueLayers(packed.shape, arrays));
      return EnqueueLogits(arrays.logits_indices, batch);
    };
    // One eager run first: cuBLASLt picks its algorithms and CUDA loads its modules outside the
    // capture, where both may allocate and synchronize.
    RETURN_IF_ERROR(Upload(packed));
    RETURN_IF_ERROR(enqueue());
    RETURN_IF_ERROR(stream_.Synchronize());
    ASSIGN_OR_RETURN(CudaGraphExec exec, CudaGraphExec::Capture(stream_.get(), enqueue));
    graphs_.push_back(DecodeGraph{batch, std::move(exec)});
  }
  LogInfo(kLog, "rank %d: captured %zu decode graphs (batch 1 to %lld)", layout_.rank,
          graphs_.size(), static_cast<long long>(options_.max_num_seqs));
  return absl::OkStatus();
}

CudaForwardPass::StepArrays CudaForwardPass::ArraysFor(const StepInputLayout& layout) const {
  const int32_t* base = inputs_.data();
  return StepArrays{
      base + layout.token_ids,      base + layout.positions,
      base + layout.query_start,    base + layout.context_lens,
      base + layout.logits_indices, base + layout.block_tables,
      base + layout.decode_work,    reinterpret_cast<const int64_t*>(base + layout.slot_mapping)};
}

absl::Status CudaForwardPass::Upload(const PackedStep& packed) {
  if (packed.layout.total > inputs_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("step inputs of ", packed.layout.total,
                                                   " words exceed the buffer of ", inputs_.size()));
  }
  // From pageable memory the calls return once the bytes are staged, so `packed` may go.
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(inputs_.data(), packed.data.data(), packed.data.size() * sizeof(int32_t),
                      cudaMemcpyHostToDevice, stream_.get()),
      "step input upload"));
  if (packed.shape.num_seqs == 0) return absl::OkStatus();
  // Each row's used entries into the device rows of shape.blocks_per_seq entries.
  const size_t row_bytes = packed.used_blocks * sizeof(int32_t);
  return CudaStatus(cudaMemcpy2DAsync(inputs_.data() + packed.layout.block_tables,
                                      packed.shape.blocks_per_seq * sizeof(int32_t),
                                      packed.tables.data(), row_bytes, row_bytes,
                                      packed.shape.num_seqs, cudaMemcpyHostToDevice, stream_.get()),
                    "block table upload");
}

absl::Status CudaForwardPass::EnqueueLayers(const StepShape& shape, const StepArrays& arrays) {
  const cudaStream_t stream = stream_.get();
  const int64_t n = shape.num_tokens;
  const int64_t hidden = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (layout_.first_stage()) {
    Embedding(weights_.token_embedding.weight.data(), config_.vocab_size, hidden, arrays.token_ids,
              n, residual_.data(), stream);
    if (config_.embedding_scale != 1.0f) {  // Gemma
      ScaleInPlace(residual_.data(), n * hidden, config_.embedding_scale, stream);
    }
  } else {
    // The previous stage's residual and its last MLP output, which AddRmsNorm adds below.
    RETURN_IF_ERROR(from_previous_->EnqueueRecv(residual_.data(), n * hidden, 1, stream));
    RETURN_IF_ERROR(from_previous_->EnqueueRecv(partial_.data(), n * hidden, 1, stream));
  }
  for (int layer = 0; layer < layout_.layers.size; ++layer) {  // this stage's, from 0
    const DeviceLayerWeights& w = weights_.layers[layer];
    if (layer == 0 && layout_.first_stage()) {
      RmsNorm(residual_.data(), w.attn_norm.data(), n, hidden, eps, normed_.data(), stream);
    } else {  // The previous layer's MLP output joins the residual here.
      AddRmsNorm(residual_.data(), partial_.data(), w.attn_norm.data(), n, hidden, eps,
                 normed_.data(), stream);
    }
    RETURN_IF_ERROR(EnqueueAttention(layer, shape, arrays));
    AddRmsNorm(residual_.data(), partial_.data(), w.ffn_norm.data(), n, hidden, eps, normed_.data(),
               stream);
    RETURN_IF_ERROR(EnqueueMlp(layer, n));
  }
  if (!layout_.last_stage()) {
    RETURN_IF_ERROR(to_next_->EnqueueSend(residual_.data(), n * hidden, 0, stream));
    return to_next_->EnqueueSend(partial_.data(), n * hidden, 0, stream);
  }
  AddRmsNorm(residual_.data(), partial_.data(), weights_.output_norm.data(), n, hidden, eps,
             normed_.data(), stream);
  return absl::OkStatus();
}

absl::Status CudaForwardPass::EnqueueAttention(int layer, const StepShape& shape,
                                               const StepArrays& arrays) {
  const cudaStream_t stream = stream_.get();
  const DeviceLayerWeights& w = weights_.layers[layer];
  const int64_t n = shape.num_tokens;
  const int64_t hidden = config_.hidden_size;
  const int64_t head_dim = config_.head_dim;
  const int64_t q_heads = layout_.q_heads.size;
  const int64_t kv_heads = layout_.kv_heads.size;
  const int64_t qkv_width = layout_.qkv_width(head_dim);

  RETURN_IF_ERROR(Linear(w.qkv, normed_.data(), n, qkv_.data()));
  if (lora_step_) {
    lora_pool_->Apply(layer, {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV}, normed_.data(),
                      hidden, qkv_.data(), qkv_width, stream);
  }
  if (!w.qkv_bias.empty()) AddBias(qkv_.data(), w.qkv_bias.data(), n, qkv_width, stream);
  if (!w.q_norm.empty()) {  // Qwen3: the projections' q and k heads, before RoPE
    QkHeadRmsNorm(qkv_.data(), w.q_norm.data(), w.k_norm.data(), n, q_heads, kv_heads, head_dim,
                  static_cast<float>(config_.rms_norm_eps), stream);
  }
  const int64_t layer_bytes =
      kv_shape_.num_blocks * kv_shape_.floats_per_block() * kv_shape_.bytes_per_element;
  uint8_t* k_pool = kv_pool_.data() + (2 * layer) * layer_bytes;
  uint8_t* v_pool = k_pool + layer_bytes;
  QkvRopeParams split;
  PagedAttentionParams p;
  if (kv_shape_.fp8) {
    split.k_cache_fp8 = k_pool;
    split.v_cache_fp8 = v_pool;
    split.k_scales = w.k_cache_scales.data();
    split.v_scales = w.v_cache_scales.data();
    p.k_cache_fp8 = k_pool;
    p.v_cache_fp8 = v_pool;
    p.k_scales = split.k_scales;
    p.v_scales = split.v_scales;
  } else {
    split.k_cache = reinterpret_cast<bf16*>(k_pool);
    split.v_cache = reinterpret_cast<bf16*>(v_pool);
    p.k_cache = split.k_cache;
    p.v_cache = split.v_cache;
  }
  split.qkv = qkv_.data();
  split.positions = arrays.positions;
  split.slot_mapping = arrays.slot_mapping;
  split.inv_freq = config_.IsLocalLayer(layout_.layers.begin + layer)
                       ? weights_.rope_inv_freq_local.data()
                       : weights_.rope_inv_freq.data();
  split.q = q_.data();
  split.num_tokens = n;
  split.num_q_heads = q_heads;
  split.num_kv_heads = kv_heads;
  split.head_dim = head_dim;
  split.rope_dims = config_.rope_dims;
  split.style = config_.rope_rotate_half ? RopeStyle::kRotateHalf : RopeStyle::kAdjacentPairs;
  SplitQkvRopeWriteKv(split, stream);
  p.q = q_.data();
  p.query_start = arrays.query_start;
  p.context_lens = arrays.context_lens;
  p.block_tables = arrays.block_tables;
  p.out = attn_.data();
  p.num_tokens = n;
  p.max_query_len = shape.max_query_len;
  p.max_context_len = shape.max_context_len;
  p.num_seqs = shape.num_seqs;
  p.max_blocks_per_seq = shape.blocks_per_seq;
  p.num_heads = q_heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = kv_shape_.block_size;
  p.scale = config_.AttentionScale();
  p.decode_work = arrays.decode_work;
  p.workspace = attention_workspace_.data();
  p.workspace_bytes = static_cast<size_t>(attention_workspace_.bytes());
  PagedAttention(p, stream);

  RETURN_IF_ERROR(Linear(w.attn_output, attn_.data(), n, partial_.data()));
  if (lora_step_) {
    lora_pool_->Apply(layer, {LoraTarget::kO}, attn_.data(), layout_.q_width(head_dim),
                      partial_.data(), hidden, stream);
  }
  RETURN_IF_ERROR(comm_->EnqueueAllReduceSum(partial_.data(), n * hidden, stream));
  if (!w.post_attention_norm.empty()) {  // Gemma 3: normed before it joins the residual
    RmsNorm(partial_.data(), w.post_attention_norm.data(), n, hidden,
            static_cast<float>(config_.rms_norm_eps), partial_.data(), stream);
  }
  return absl::OkStatus();
}

absl::Status CudaForwardPass::EnqueueMlp(int layer, int64_t num_tokens) {
  const cudaStream_t stream = stream_.get();
  const DeviceLayerWeights& w = weights_.layers[layer];
  const int64_t hidden = config_.hidden_size;
  const int64_t ffn = layout_.ffn.size;
  // One product against the stacked [gate; up] rows; SiLU·mul reads each row's two halves.
  RETURN_IF_ERROR(Linear(w.gate_up, normed_.data(), num_tokens, gate_up_.data()));
  if (lora_step_) {
    lora_pool_->Apply(layer, {LoraTarget::kGate, LoraTarget::kUp}, normed_.data(), hidden,
                      gate_up_.data(), 2 * ffn, stream);
  }
  if (config_.ffn_activation == FfnActivation::kGeluTanh) {
    GeluTanhMulRows(gate_up_.data(), num_tokens, ffn, act_.data(), stream);
  } else {
    SiluMulRows(gate_up_.data(), num_tokens, ffn, act_.data(), stream);
  }
  RETURN_IF_ERROR(Linear(w.down, act_.data(), num_tokens, partial_.data()));
  if (lora_step_) {
    lora_pool_->Apply(layer, {LoraTarget::kDown}, act_.data(), ffn, partial_.data(), hidden,
                      stream);
  }
  RETURN_IF_ERROR(comm_->EnqueueAllReduceSum(partial_.data(), num_tokens * hidden, stream));
  if (!w.post_ffw_norm.empty()) {
    RmsNorm(partial_.data(), w.post_ffw_norm.data(), num_tokens, hidden,
            static_cast<float>(config_.rms_norm_eps), partial_.data(), stream);
  }
  return absl::OkStatus();
}

absl::Status CudaForwardPass::EnqueueLogits(const int32_t* rows, int64_t count) {
  const cudaStream_t stream = stream_.get();
  const int64_t hidden = config_.hidden_size;
  // The embedding kernel is a row gather: here, of the final-normed hidden states.
  Embedding(normed_.data(), token_capacity_, hidden, rows, count, selected_.data(), stream);
  const bf16* head = weights_.lm_head.rows > 0
                         ? weights_.lm_head.weight.data()
                         : weights_.token_embedding.weight.data() + layout_.vocab.begin * hidden;
  RETURN_IF_ERROR(gemm_->MatmulBT(selected_.data(), head, count, layout_.vocab.size, hidden,
                                  local_logits_.data(), stream));
  return comm_->EnqueueGatherToRoot(
      local_logits_.data(), VocabGatherCounts(config_.vocab_size, layout_.world_size, count),
      gathered_logits(), stream);
}

float* CudaForwardPass::gathered_logits() {
  return layout_.world_size > 1 ? gathered_.data() : local_logits_.data();
}

absl::Status CudaForwardPass::EnqueueLogitsCopy(int64_t count, int64_t wanted, float* dst,
                                                cudaMemcpyKind kind) {
  const float* src = gathered_logits();
  const int64_t vocab = config_.vocab_size;
  // Rank r's part is [count, vocab_r] at the offset of the ranks before it.
  int64_t offset = 0;
  for (int r = 0; r < layout_.world_size; ++r) {
    const Range range = BalancedRange(vocab, r, layout_.world_size);
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpy2DAsync(dst + range.begin, vocab * sizeof(float), src + offset,
                                     range.size * sizeof(float), range.size * sizeof(float), wanted,
                                     kind, stream_.get()),
                   "logits copy"));
    offset += count * range.size;
  }
  return absl::OkStatus();
}

absl::StatusOr<const float*> CudaForwardPass::ContiguousLogits(int64_t count, int64_t wanted) {
  if (layout_.world_size == 1) return local_logits_.data();
  RETURN_IF_ERROR(EnqueueLogitsCopy(count, wanted, contiguous_.data(), cudaMemcpyDeviceToDevice));
  return contiguous_.data();
}

absl::Status CudaForwardPass::RunEager(const ForwardBatch& batch, LogitsPass on_pass) {
  const PackedStep packed =
      PackStep(batch, std::min<int64_t>(batch.max_blocks_per_seq, blocks_per_seq_), heads());
  RETURN_IF_ERROR(Upload(packed));
  const StepArrays arrays = ArraysFor(packed.layout);
  RETURN_IF_ERROR(EnqueueLayers(packed.shape, arrays));
  const int64_t m = layout_.last_stage() ? batch.num_logits() : 0;
  for (int64_t start = 0; start < m; start += logits_capacity_) {
    const int64_t count = std::min(logits_capacity_, m - start);
    RETURN_IF_ERROR(EnqueueLogits(arrays.logits_indices + start, count));
    if (layout_.rank == 0) RETURN_IF_ERROR(on_pass(start, count, count));
  }
  ++eager_steps_;
  return absl::OkStatus();
}

absl::Status CudaForwardPass::RunGraph(const ForwardBatch& batch, const DecodeGraph& graph,
                                       LogitsPass on_pass) {
  const PackedStep packed = PackStep(batch, blocks_per_seq_, heads(), graph.batch);
  RETURN_IF_ERROR(Upload(packed));
  RETURN_IF_ERROR(graph.exec.Launch(stream_.get()));
  if (layout_.rank == 0) RETURN_IF_ERROR(on_pass(0, graph.batch, batch.num_tokens()));
  ++graph_steps_;
  return absl::OkStatus();
}

absl::Status CudaForwardPass::CheckStep(const ForwardBatch& batch) const {
  RETURN_IF_ERROR(ValidateForwardBatch(batch, config_, kv_shape_));
  if (batch.num_tokens() > token_capacity_ || batch.num_seqs() > options_.max_num_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("a step of ", batch.num_tokens(), " tokens in ", batch.num_seqs(),
                     " sequences exceeds the CUDA worker's limits of ", token_capacity_,
                     " tokens and ", options_.max_num_seqs,
                     " sequences (the coordinator's --max-num-batched-tokens and "
                     "--max-num-seqs at Init)"));
  }
  const int32_t longest = *std::max_element(batch.context_lens.begin(), batch.context_lens.end());
  if (longest > max_context_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a context of ", longest, " tokens exceeds what the KV pool holds (", max_context_, ")"));
  }
  return absl::OkStatus();
}

absl::Status CudaForwardPass::Enqueue(const ForwardBatch& batch, LogitsPass on_pass) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
  ASSIGN_OR_RETURN(const StepLoras loras, TakeStepLoras(batch, loras_));
  lora_step_ = !loras.groups.empty();
  if (lora_step_) RETURN_IF_ERROR(lora_pool_->Prepare(loras, stream_.get()));
  if (!lora_step_ && !graphs_.empty() && IsDecodeBatch(batch)) {
    const auto graph = std::find_if(graphs_.begin(), graphs_.end(), [&](const DecodeGraph& g) {
      return g.batch >= batch.num_seqs();
    });
    if (graph != graphs_.end()) return RunGraph(batch, *graph, on_pass);
  }
  return RunEager(batch, on_pass);
}

absl::Status CudaForwardPass::Forward(const ForwardBatch& batch, std::vector<float>* logits) {
  logits->clear();
  RETURN_IF_ERROR(CheckStep(batch));
  const int64_t vocab = config_.vocab_size;
  auto copy = [&](int64_t start, int64_t count, int64_t wanted) -> absl::Status {
    if (start == 0) logits->resize(batch.num_logits() * vocab);
    return EnqueueLogitsCopy(count, wanted, logits->data() + start * vocab, cudaMemcpyDeviceToHost);
  };
  RETURN_IF_ERROR(Enqueue(batch, copy));
  return stream_.Synchronize();
}

absl::Status CudaForwardPass::ForwardAndProcess(const ForwardBatch& batch,
                                                absl::Span<const LogitsRequest> requests,
                                                std::vector<LogitsResult>* results) {
  results->clear();
  RETURN_IF_ERROR(CheckStep(batch));
  if (layout_.rank != 0 || !layout_.last_stage()) {
    RETURN_IF_ERROR(Enqueue(batch, [](int64_t, int64_t, int64_t) { return absl::OkStatus(); }));
    return stream_.Synchronize();
  }
  // Begin refuses only what ModelRunner never builds (rows outside the step or shared, more rows
  // than tokens): the other ranks are about to enter this step's collectives, so a refusal here
  // is a broken invariant to report loudly, not an error that would leave them waiting.
  const absl::Status begun = processor_->Begin(requests, batch.num_logits());
  TP_CHECK_MSG(begun.ok(), std::string(begun.message()).c_str());
  auto process = [&](int64_t start, int64_t count, int64_t wanted) -> absl::Status {
    ASSIGN_OR_RETURN(const float* rows, ContiguousLogits(count, wanted));
    return processor_->EnqueuePass(rows, start, wanted);
  };
  RETURN_IF_ERROR(Enqueue(batch, process));
  return processor_->Finish(results);
}

}  // namespace tpserve::cuda
