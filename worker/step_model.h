// What a worker runs steps on: the Llama forward pass of one tensor-parallel rank, on the CPU
// (LlamaModel) or on a CUDA device (cuda::CudaLlamaModel), with its weights and its paged KV pool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/forward_batch.h"
#include "worker/kv_cache.h"

namespace tpserve {

class StepModel {
 public:
  virtual ~StepModel() = default;

  // Runs one step. On rank 0 `logits` becomes [batch.num_logits(), vocab_size] (host memory,
  // fp32); on other ranks it is left empty. INVALID_ARGUMENT when the batch names tokens, blocks
  // or positions outside the model or the pool, or exceeds the sizes the model was built for; the
  // cache is not touched then. Every rank runs the same batches in the same order.
  virtual absl::Status Forward(const ForwardBatch& batch, std::vector<float>* logits) = 0;

  virtual const KvCacheShape& kv_shape() const = 0;
  // Bytes this rank's weights occupy where they live (host or device memory).
  virtual int64_t weight_bytes() const = 0;
  // "cpu", or "cuda:ORDINAL (DEVICE NAME)".
  virtual std::string device_name() const = 0;
};

}  // namespace tpserve
