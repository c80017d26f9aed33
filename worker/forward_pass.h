// What a worker runs steps on: the decoder forward pass of one tensor-parallel rank, on the CPU
// (CpuForwardPass) or on a CUDA device (cuda::CudaForwardPass), with its weights and its paged KV
// pool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/forward_batch.h"
#include "worker/kv_cache.h"
#include "worker/logits_processor.h"
#include "worker/lora_shard.h"

namespace tpserve {

class ForwardPass {
 public:
  virtual ~ForwardPass() = default;

  // Runs one step. On rank 0 (of the last pipeline stage) `logits` becomes
  // [batch.num_logits(), vocab_size] (host memory, fp32); on other ranks it is left empty.
  // INVALID_ARGUMENT when the batch names tokens, blocks or positions outside the model or the
  // pool, or exceeds the sizes the model was built for; the cache is not touched then. Every rank
  // runs the same batches in the same order.
  virtual absl::Status Forward(const ForwardBatch& batch, std::vector<float>* logits) = 0;

  // Runs one step as Forward does and, on rank 0 (of the last pipeline stage), turns its logits
  // into tokens through the logits processor: one result per request, whose rows index the
  // batch's logits rows (checked with CheckLogitsRequest). Other ranks leave `results` empty. This
  // default brings the logits to the host and processes them there, which is where the CPU model's
  // logits are; a device model overrides it to process them where they are.
  virtual absl::Status ForwardAndProcess(const ForwardBatch& batch,
                                         absl::Span<const LogitsRequest> requests,
                                         std::vector<LogitsResult>* results);

  virtual const KvCacheShape& kv_shape() const = 0;
  // Bytes this rank's weights occupy where they live (host or device memory).
  virtual int64_t weight_bytes() const = 0;
  // "cpu", or "cuda:ORDINAL (DEVICE NAME)".
  virtual std::string device_name() const = 0;

  // Where a batch's LoRA slots (ForwardBatch::adapters) are looked up; must outlive the pass.
  void set_loras(const LoraTable* loras) { loras_ = loras; }

 protected:
  const LoraTable* loras_ = nullptr;

 private:
  std::vector<float> host_logits_;  // [num_logits, vocab] of the last step, reused
  CpuLogitsProcessor host_processor_;
};

}  // namespace tpserve
