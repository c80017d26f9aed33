// The Llama forward pass of one tensor-parallel rank on a CUDA device: bf16 weights, activations
// and KV pool in device memory (plain cudaMalloc), fp32 inside every kernel. The same layer as
// CpuForwardPass (worker/cpu_forward_pass.h), fused where the kernels allow:
//   embedding (× sqrt(hidden): Gemma) → [AddRmsNorm → QKV GEMM → + QKV bias (Qwen2) → q/k head
//   norms (Qwen3, Gemma 3) → split, RoPE (the CPU model's pair layout and frequency table, the
//   local layers' own table for Gemma 3) and KV write in one kernel → paged attention → o_proj
//   GEMM → all-reduce → (its norm: Gemma 3) → AddRmsNorm → gate_up GEMM → SiLU·mul (GELU·mul:
//   Gemma) → down GEMM → all-reduce → (its norm: Gemma 3)] × layers → AddRmsNorm (final norm) →
//   rows that want logits → lm_head GEMM (fp32 out) → gather to rank 0.
// A pipeline stage runs its own layers (ShardLayout::layers): one after the first receives the
// residual and the last MLP output from the previous stage (NCCL recv on the link's group)
// instead of the embedding, one before the last sends them on instead of the final norm and
// logits. Stages run eagerly: no decode graphs.
// Everything is enqueued on one compute stream, the DeviceCommunicator's collectives included
// (bf16 all-reduce, NCCL in a group), and the step synchronizes once, at its end.
//
// ForwardAndProcess, the serving step, turns rank 0's logits into tokens on the device
// (CudaLogitsProcessor: greedy and seeded sampling, allow-list masks, greedy draft verification,
// logprobs) and copies back only token ids and logprobs; the requests it hands to the host
// (return_logits for Score, penalties, sampling verification of drafts) have their own rows
// copied, and no others. Forward copies every logits row to the host.
//
// Every buffer a step touches is allocated at load for the scheduler's limits (max_num_seqs,
// max_num_batched_tokens), so a step allocates nothing and the KV pool can take what
// --gpu-memory-utilization leaves. Pure decode steps run CUDA graphs captured at load for the
// batch sizes of DecodeBuckets (padded up to the bucket); other steps, and steps with LoRA
// adapters (worker/cuda/cuda_lora_pool.h), run eagerly. A graph bakes in the NCCL communicator: a
// re-formed group of several ranks loads a new model (WorkerServer).
//
// Decode attention runs over a work list packed with each step's inputs, so a graph's grid and
// workspace depend on its batch size, not on the longest context. Known costs, for later: the
// block tables are uploaded at the width of the longest context the pool allows; step inputs are
// uploaded from pageable memory.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "model/model_config.h"
#include "model/shard_layout.h"
#include "worker/comm/device_communicator.h"
#include "worker/cuda/cuda_graph.h"
#include "worker/cuda/cuda_logits_processor.h"
#include "worker/cuda/cuda_lora_pool.h"
#include "worker/cuda/device_weights.h"
#include "worker/cuda_backend.h"
#include "worker/forward_pass.h"
#include "worker/loaded_shard.h"
#include "worker/step_inputs.h"

namespace tpserve::cuda {

class CudaForwardPass : public ForwardPass {
 public:
  // Loads onto options.cuda.device (made current on the calling thread, which must be the one
  // that runs Forward). `comm` (the layout's rank and world size; an NcclCommunicator on the same
  // device for more than one rank) must outlive the model: the decode graphs capture its
  // collectives. FAILED_PRECONDITION without a usable device, RESOURCE_EXHAUSTED when the
  // weights, buffers or pool do not fit, INVALID_ARGUMENT for shapes the kernels do not support.
  // `device` is options.cuda.device as SelectCudaDevice found it.
  static absl::StatusOr<std::unique_ptr<CudaForwardPass>> Create(
      const ModelRunnerOptions& options, const CudaDeviceChoice& device, const ModelConfig& config,
      const ShardLayout& layout, ModelWeights weights, DeviceCommunicator* comm);

  absl::Status Forward(const ForwardBatch& batch, std::vector<float>* logits) override;
  absl::Status ForwardAndProcess(const ForwardBatch& batch,
                                 absl::Span<const LogitsRequest> requests,
                                 std::vector<LogitsResult>* results) override;
  const KvCacheShape& kv_shape() const override { return kv_shape_; }
  int64_t weight_bytes() const override { return weights_.bytes(); }
  std::string device_name() const override { return device_name_; }

  // For tests and logs: decode graphs held, and steps run through a graph or eagerly.
  size_t num_decode_graphs() const { return graphs_.size(); }
  int64_t graph_steps() const { return graph_steps_; }
  int64_t eager_steps() const { return eager_steps_; }

 private:
  // Device pointers to the arrays of one packed step (see StepInputLayout).
  struct StepArrays {
    const int32_t* token_ids;
    const int32_t* positions;
    const int32_t* query_start;
    const int32_t* context_lens;
    const int32_t* logits_indices;
    const int32_t* block_tables;
    const int32_t* decode_work;
    const int64_t* slot_mapping;
  };
  struct DecodeGraph {
    int64_t batch;
    CudaGraphExec exec;
  };

  CudaForwardPass(const ModelConfig& config, const ShardLayout& layout, DeviceCommunicator* comm,
                  const CudaRunnerOptions& options, CudaStream stream);

  // FP8 linears (--quantization fp8, or an FP8 checkpoint): how the scales enter the products
  // (Gemm::ChooseFp8Mode over the layer's shapes; the epilogue if any shape needs it), logged.
  // Errors begin with `why`, what asked for FP8.
  absl::Status ChooseFp8Mode(absl::string_view why);
  absl::Status AllocateStepBuffers();
  AttentionHeads heads() const { return {layout_.q_heads.size, layout_.kv_heads.size}; }
  // out[m, w.rows] = x[m, w.cols] · wᵀ, enqueued: a bf16 product, or FP8 W8A8 with x quantized
  // per token into act_codes_ first.
  absl::Status Linear(const DeviceLinear& w, const bf16* x, int64_t m, bf16* out);
  absl::Status WarmUpCollectives();
  // The pool's block count; kv_shape_'s other fields are set by Create.
  absl::Status AllocateKvPool(const ModelRunnerOptions& options);
  absl::Status CaptureDecodeGraphs();

  StepArrays ArraysFor(const StepInputLayout& layout) const;
  absl::Status Upload(const PackedStep& packed);
  absl::Status EnqueueLayers(const StepShape& shape, const StepArrays& arrays);
  absl::Status EnqueueAttention(int layer, const StepShape& shape, const StepArrays& arrays);
  absl::Status EnqueueMlp(int layer, int64_t num_tokens);
  // Final-normed rows `rows[0, count)` → lm_head → this rank's logits, gathered on rank 0.
  absl::Status EnqueueLogits(const int32_t* rows, int64_t count);
  // After EnqueueLogits(…, count): the first `wanted` rows into `dst` ([wanted, vocab], host),
  // on rank 0; queued on the stream.
  absl::Status EnqueueLogitsCopy(int64_t count, int64_t wanted, float* dst, cudaMemcpyKind kind);
  // Where the gather puts rank 0's logits: gathered_ in a group, local_logits_ (gathered in
  // place) in a world of one.
  float* gathered_logits();
  // After EnqueueLogits(…, count), on rank 0: the first `wanted` rows as [wanted, vocab] on the
  // device (local_logits_ in a world of one; copied into contiguous_ in a group).
  absl::StatusOr<const float*> ContiguousLogits(int64_t count, int64_t wanted);

  // Called on rank 0 after each logits pass: step rows [start, start + wanted) are enqueued
  // (computed as EnqueueLogits(…, count) computes them).
  using LogitsPass = absl::FunctionRef<absl::Status(int64_t start, int64_t count, int64_t wanted)>;
  // INVALID_ARGUMENT for a batch outside the model, the pool or the sizes of Create.
  absl::Status CheckStep(const ForwardBatch& batch) const;
  // Enqueues a checked step, through a decode graph or eagerly; does not wait for it.
  absl::Status Enqueue(const ForwardBatch& batch, LogitsPass on_pass);
  absl::Status RunEager(const ForwardBatch& batch, LogitsPass on_pass);
  absl::Status RunGraph(const ForwardBatch& batch, const DecodeGraph& graph, LogitsPass on_pass);

  const ModelConfig config_;
  const ShardLayout layout_;
  DeviceCommunicator* const comm_;
  // Pipeline stages: the links to the neighbouring stages (ModelRunnerOptions::links), null where
  // there is none.
  DeviceCommunicator* from_previous_ = nullptr;
  DeviceCommunicator* to_next_ = nullptr;
  const CudaRunnerOptions options_;
  std::string device_name_;
  CudaStream stream_;
  std::unique_ptr<Gemm> gemm_;
  DeviceWeights weights_;
  KvCacheShape kv_shape_;
  // [layer][K, V][num_blocks * block values], bf16 or FP8 E4M3 codes (kv_shape_.fp8).
  DeviceBuffer<uint8_t> kv_pool_;

  // Step buffers, sized at load.
  const int64_t token_capacity_;  // tokens per step
  int64_t logits_capacity_ = 0;   // logits rows per pass (a step with more makes several)
  int64_t blocks_per_seq_ = 0;    // block-table stride of graph steps: the longest context's
  int32_t max_context_ = 0;       // the longest context a step may have (the pool bounds it)
  DeviceBuffer<int32_t> inputs_;
  DeviceBuffer<bf16> residual_, normed_, partial_;  // [tokens, hidden]
  DeviceBuffer<bf16> qkv_, q_, attn_;               // [tokens, local widths]
  DeviceBuffer<bf16> gate_up_;                      // [tokens, 2 * ffn_local]: gate, then up
  DeviceBuffer<bf16> act_;                          // [tokens, ffn_local]
  // FP8 W8A8 (fp8_mode_ set): a linear's input codes [tokens, widest input] and per-token
  // scales; with the epilogue mode, the unscaled fp32 product [tokens, widest output].
  std::optional<Fp8ScaleMode> fp8_mode_;
  DeviceBuffer<uint8_t> act_codes_;
  DeviceBuffer<float> act_scales_, fp8_raw_;
  DeviceBuffer<uint8_t> attention_workspace_;
  DeviceBuffer<bf16> selected_;                     // [logits rows, hidden]
  DeviceBuffer<float> local_logits_;                // [logits rows, vocab_local]
  DeviceBuffer<float> gathered_;                    // [logits rows, vocab] on rank 0 of a group
  DeviceBuffer<float> contiguous_;                  // [logits rows, vocab] on rank 0 of a group
  std::unique_ptr<CudaLogitsProcessor> processor_;  // rank 0
  // LoRA adapters (--max-loras > 0), and whether the step being enqueued runs any.
  std::unique_ptr<CudaLoraPool> lora_pool_;
  bool lora_step_ = false;

  std::vector<DecodeGraph> graphs_;  // ascending batch
  int64_t graph_steps_ = 0;
  int64_t eager_steps_ = 0;
};

}  // namespace tpserve::cuda
