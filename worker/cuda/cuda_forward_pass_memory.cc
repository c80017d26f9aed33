// What CudaForwardPass::Create allocates on the device, in order: the step buffers (and the LoRA
// pool), the collectives' own buffers (warmed up), then the KV pool from what is left.
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/paged_attention.h"
#include "worker/cuda/cuda_forward_pass.h"
#include "worker/kv_budget.h"

namespace tpserve::cuda {
namespace {

// Kept free beside the KV pool for what others allocate after it: the decode graphs, cuBLASLt's
// and NCCL's internal buffers, the CUDA context's growth.
constexpr int64_t kLibraryReserveBytes = int64_t{512} << 20;

template <typename T>
absl::Status Allocate(DeviceBuffer<T>& buffer, int64_t count) {
  ASSIGN_OR_RETURN(buffer, DeviceBuffer<T>::Allocate(count));
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaForwardPass::AllocateStepBuffers() {
  const int64_t hidden = config_.hidden_size;
  const int64_t head_dim = config_.head_dim;
  const int64_t q_width = layout_.q_width(head_dim);
  const int64_t ffn = layout_.ffn.size;
  const int64_t max_seqs = options_.max_num_seqs;
  logits_capacity_ = max_seqs;
  blocks_per_seq_ = (config_.context_length + kv_shape_.block_size - 1) / kv_shape_.block_size;
  const int64_t t = token_capacity_;
  RETURN_IF_ERROR(
      Allocate(inputs_, StepInputLayout::For(t, max_seqs, t, blocks_per_seq_, heads()).total));
  RETURN_IF_ERROR(Allocate(residual_, t * hidden));
  RETURN_IF_ERROR(Allocate(normed_, t * hidden));
  RETURN_IF_ERROR(Allocate(partial_, t * hidden));
  RETURN_IF_ERROR(Allocate(qkv_, t * layout_.qkv_width(head_dim)));
  RETURN_IF_ERROR(Allocate(q_, t * q_width));
  RETURN_IF_ERROR(Allocate(attn_, t * q_width));
  RETURN_IF_ERROR(Allocate(gate_up_, t * 2 * ffn));
  RETURN_IF_ERROR(Allocate(act_, t * ffn));
  if (fp8_mode_.has_value()) {
    RETURN_IF_ERROR(Allocate(act_codes_, t * std::max({hidden, q_width, ffn})));
    RETURN_IF_ERROR(Allocate(act_scales_, t));
    if (*fp8_mode_ == Fp8ScaleMode::kEpilogue) {
      RETURN_IF_ERROR(
          Allocate(fp8_raw_, t * std::max({layout_.qkv_width(head_dim), hidden, 2 * ffn})));
    }
  }
  RETURN_IF_ERROR(Allocate(attention_workspace_,
                           static_cast<int64_t>(PagedAttentionWorkspaceBytes(
                               max_seqs, layout_.q_heads.size, layout_.kv_heads.size, head_dim))));
  // Logits are the last stage's: the KV pools of the others keep that memory.
  if (!layout_.last_stage()) return absl::OkStatus();
  RETURN_IF_ERROR(Allocate(selected_, logits_capacity_ * hidden));
  RETURN_IF_ERROR(Allocate(local_logits_, logits_capacity_ * layout_.vocab.size));
  if (layout_.world_size > 1 && layout_.rank == 0) {
    RETURN_IF_ERROR(Allocate(gathered_, logits_capacity_ * config_.vocab_size));
    RETURN_IF_ERROR(Allocate(contiguous_, logits_capacity_ * config_.vocab_size));
  }
  if (layout_.rank == 0) {
    ASSIGN_OR_RETURN(processor_, CudaLogitsProcessor::Create(config_.vocab_size, logits_capacity_,
                                                             token_capacity_, stream_.get()));
  }
  return absl::OkStatus();
}

absl::Status CudaForwardPass::AllocateKvPool(const ModelRunnerOptions& options) {
  // Slots are int32 inside the attention kernels.
  const int64_t max_blocks = std::numeric_limits<int32_t>::max() / options.block_size;
  if (options.kv_cache_blocks > 0) {
    kv_shape_.num_blocks = options.kv_cache_blocks;
  } else if (options.kv_cache_bytes > 0) {
    kv_shape_.num_blocks = options.kv_cache_bytes / kv_shape_.bytes_per_block();
  } else {
    size_t free = 0, total = 0;
    RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free, &total), "cudaMemGetInfo"));
    DeviceMemory memory;
    memory.total_bytes = static_cast<int64_t>(total);
    memory.free_bytes = static_cast<int64_t>(free);
    ASSIGN_OR_RETURN(
        kv_shape_.num_blocks,
        KvBlocksForUtilization(memory, options_.gpu_memory_utilization, kLibraryReserveBytes,
                               kv_shape_.bytes_per_block(), max_blocks));
  }
  if (kv_shape_.num_blocks <= 0 || kv_shape_.num_blocks > max_blocks) {
    return absl::InvalidArgumentError(absl::StrCat("a KV pool of ", kv_shape_.num_blocks,
                                                   " blocks is outside [1, ", max_blocks, "]"));
  }
  RETURN_IF_ERROR(Allocate(kv_pool_, kv_shape_.num_blocks * kv_shape_.bytes_per_block()));
  // No sequence holds more blocks than the pool: a small pool bounds the block tables' width.
  blocks_per_seq_ = std::min(blocks_per_seq_, kv_shape_.num_blocks);
  max_context_ = static_cast<int32_t>(
      std::min(config_.context_length, blocks_per_seq_ * kv_shape_.block_size));
  // Padding rows of a decode graph read block 0: make every block finite.
  return CudaStatus(cudaMemsetAsync(kv_pool_.data(), 0, kv_pool_.bytes(), stream_.get()),
                    "KV pool clear");
}

absl::Status CudaForwardPass::WarmUpCollectives() {
  // NCCL sets up connections, and allocates their buffers, at a communicator's first collective
  // of each kind: let that happen before the KV pool takes what is free. The data is garbage.
  // The links first, stage after stage, then the stage's own group.
  const int64_t hidden = config_.hidden_size;
  if (from_previous_ != nullptr) {
    RETURN_IF_ERROR(from_previous_->EnqueueRecv(residual_.data(), hidden, 1, stream_.get()));
  }
  if (to_next_ != nullptr) {
    RETURN_IF_ERROR(to_next_->EnqueueSend(residual_.data(), hidden, 0, stream_.get()));
  }
  if (layout_.world_size == 1) return stream_.Synchronize();
  RETURN_IF_ERROR(comm_->EnqueueAllReduceSum(partial_.data(), token_capacity_ * config_.hidden_size,
                                             stream_.get()));
  if (!layout_.last_stage()) return stream_.Synchronize();
  RETURN_IF_ERROR(comm_->EnqueueGatherToRoot(
      local_logits_.data(),
      VocabGatherCounts(config_.vocab_size, layout_.world_size, logits_capacity_),
      gathered_logits(), stream_.get()));
  return stream_.Synchronize();
}

}  // namespace tpserve::cuda
