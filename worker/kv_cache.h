// The paged KV pool of one rank: for every layer, K and V for `num_blocks` blocks of
// `block_size` tokens of the rank's KV heads. Block ids are global (assigned by the
// coordinator); every rank stores its own heads under the same id.
#pragma once

#include <cstdint>
#include <vector>

namespace tpserve {

struct KvCacheShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t num_kv_heads = 0;  // local to this rank
  int64_t head_dim = 0;
  int64_t bytes_per_element = sizeof(float);  // fp32 on the CPU, bf16 on CUDA, 1 with fp8
  // K and V stored as FP8 E4M3 codes (kernels/cpu/fp8_e4m3.h), one byte each, of value / the
  // layer's scale for the KV head (LayerWeights::k_cache_scales, v_cache_scales).
  bool fp8 = false;

  // A rank's pool shape (num_blocks 0): fp32 values on a CPU worker, bf16 on a CUDA one, one-byte
  // E4M3 codes with `fp8` on either.
  static KvCacheShape For(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim,
                          int64_t block_size, bool cuda, bool fp8);

  int64_t floats_per_block() const { return block_size * num_kv_heads * head_dim; }
  // Bytes one block costs across all layers, K and V.
  int64_t bytes_per_block() const {
    return 2 * num_layers * floats_per_block() * bytes_per_element;
  }
};

class KvCache {
 public:
  explicit KvCache(const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  // [num_blocks, block_size, num_kv_heads, head_dim] of `layer`: fp32 values, or with shape.fp8
  // the FP8 codes (the other accessors then return null).
  float* keys(int64_t layer) { return shape_.fp8 ? nullptr : keys_[layer].data(); }
  float* values(int64_t layer) { return shape_.fp8 ? nullptr : values_[layer].data(); }
  uint8_t* fp8_keys(int64_t layer) { return shape_.fp8 ? fp8_keys_[layer].data() : nullptr; }
  uint8_t* fp8_values(int64_t layer) { return shape_.fp8 ? fp8_values_[layer].data() : nullptr; }
  int64_t bytes() const { return shape_.num_blocks * shape_.bytes_per_block(); }

 private:
  KvCacheShape shape_;
  std::vector<std::vector<float>> keys_;          // [num_layers][num_blocks * floats_per_block]
  std::vector<std::vector<float>> values_;        // same
  std::vector<std::vector<uint8_t>> fp8_keys_;    // the same with shape.fp8
  std::vector<std::vector<uint8_t>> fp8_values_;  // same
};

}  // namespace tpserve
