// One rank's weights in device memory, bf16 (DESIGN.md "Numerics"): the shard the CPU loader
// produced (GGUF blocks or fp32) is uploaded as it is and decoded to bf16 on the device, so the
// host never holds a bf16 or dequantized copy, and host memory is released layer by layer.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/device_buffer.h"
#include "worker/model_weights.h"

namespace tpserve::cuda {

struct DeviceLinear {
  DeviceBuffer<bf16> weight;  // [rows, cols]; empty once quantized to FP8
  // FP8 W8A8 (UploadWeights with fp8): E4M3 codes [rows, cols] and one scale per row (output
  // channel), kernels/cpu/fp8_matmul.h's format.
  DeviceBuffer<uint8_t> fp8;
  DeviceBuffer<float> fp8_scales;
  int64_t rows = 0;
  int64_t cols = 0;

  bool is_fp8() const { return !fp8.empty(); }
  int64_t bytes() const { return weight.bytes() + fp8.bytes() + fp8_scales.bytes(); }
};

struct DeviceLayerWeights {
  DeviceBuffer<bf16> attn_norm;  // [hidden]
  DeviceLinear qkv;              // [(q_heads + 2 * kv_heads) * head_dim, hidden]
  DeviceBuffer<float> qkv_bias;  // [qkv.rows], fp32 (added before one bf16 rounding); empty
                                 // without biases
  DeviceBuffer<bf16> q_norm, k_norm;  // [head_dim] each: Qwen3's per-head norms; else empty
  DeviceLinear attn_output;           // [hidden, q_heads * head_dim]
  DeviceBuffer<bf16> ffn_norm;   // [hidden]
  // Gemma 3's norms of the attention and MLP outputs, [hidden] each; empty without.
  DeviceBuffer<bf16> post_attention_norm, post_ffw_norm;
  DeviceLinear gate_up;          // [2 * ffn_local, hidden]: gate rows, then up rows
  DeviceLinear down;             // [hidden, ffn_local]
  // [kv_heads local] each: LayerWeights::k_cache_scales and v_cache_scales, read by an FP8 KV
  // cache's writes and attention.
  DeviceBuffer<float> k_cache_scales;
  DeviceBuffer<float> v_cache_scales;
};

struct DeviceWeights {
  DeviceLinear token_embedding;  // [vocab, hidden], decoded whole (the lookup is a row copy)
  DeviceBuffer<bf16> output_norm;
  DeviceLinear lm_head;  // [vocab_local, hidden]; empty when tied (token_embedding's rows serve)
  DeviceBuffer<double> rope_inv_freq;  // [rope_dims / 2], as ModelWeights::rope_inv_freq
  DeviceBuffer<double> rope_inv_freq_local;  // Gemma 3's local layers'; empty without
  std::vector<DeviceLayerWeights> layers;

  int64_t bytes() const;
};

// Uploads `host` to the current device through `stream` and returns when done; clears each part
// of `host` once it is on the device. An FP8 checkpoint's linears (Linear kF8E4M3) go up as their
// codes and scales. With `fp8`, each other layer linear is quantized to FP8 as it arrives (the bf16
// copy freed at once, so the peak is one linear's bf16 over the FP8 model); the embedding and the
// output head stay bf16. RESOURCE_EXHAUSTED when the device is full.
absl::StatusOr<DeviceWeights> UploadWeights(ModelWeights host, bool fp8, cudaStream_t stream);

}  // namespace tpserve::cuda
