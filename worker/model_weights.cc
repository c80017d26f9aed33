#include "worker/model_weights.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"

namespace tpserve {
namespace {

cpu::BlockFormat FormatOf(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
      return cpu::BlockFormat::kQ4_0;
    case GgmlType::kQ4_1:
      return cpu::BlockFormat::kQ4_1;
    case GgmlType::kQ8_0:
      return cpu::BlockFormat::kQ8_0;
    case GgmlType::kQ4_K:
      return cpu::BlockFormat::kQ4_K;
    case GgmlType::kQ5_K:
      return cpu::BlockFormat::kQ5_K;
    case GgmlType::kQ6_K:
      return cpu::BlockFormat::kQ6_K;
    default:
      break;
  }
  TP_CHECK(false);
  return cpu::BlockFormat::kQ8_0;
}

}  // namespace

bool KeepsBlocks(GgmlType type) {
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ8_0 ||
         type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K;
}

int64_t Linear::resident_bytes() const {
  int64_t bytes = static_cast<int64_t>(packed.data.size() + packed.super.size() +
                                       values.size() * sizeof(float) + fp8.size() +
                                       fp8_scales.size() * sizeof(float));
  for (const Linear& part : parts) bytes += part.resident_bytes();
  return bytes;
}

Linear PackedLinear(GgmlType type, const uint8_t* blocks, int64_t rows, int64_t cols) {
  Linear w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  w.packed = cpu::PackWeight(FormatOf(type), blocks, rows, cols);
  return w;
}

namespace {

// Rows `rows` of a stack of packed parts: each part's rows in the range computed apart and placed
// in their columns of y.
void ApplyStackedRows(const Linear& w, Range rows, const float* x, int64_t m, float* y) {
  thread_local std::vector<float> part_out;
  int64_t first = 0;  // the part's first row in w
  for (const Linear& part : w.parts) {
    const int64_t lo = std::max(rows.begin, first);
    const int64_t hi = std::min(rows.end(), first + part.rows);
    if (lo < hi) {
      part_out.resize(m * (hi - lo));
      cpu::PackedMatmulBT(x, m, part.packed, lo - first, hi - lo, part_out.data(),
                          w.activation_bits);
      for (int64_t i = 0; i < m; ++i) {
        std::memcpy(y + i * rows.size + (lo - rows.begin), part_out.data() + i * (hi - lo),
                    (hi - lo) * sizeof(float));
      }
    }
    first += part.rows;
  }
}

}  // namespace

void ApplyLinearRows(const Linear& w, Range rows, const float* x, int64_t m, float* y) {
  TP_CHECK(rows.begin >= 0 && rows.size >= 0 && rows.end() <= w.rows);
  TP_CHECK(w.type != GgmlType::kF8E4M3);  // FP8 codes are a CUDA rank's only
  if (!w.parts.empty()) {
    ApplyStackedRows(w, rows, x, m, y);
  } else if (w.quantized()) {
    cpu::PackedMatmulBT(x, m, w.packed, rows.begin, rows.size, y, w.activation_bits);
  } else {
    cpu::MatmulBT(x, w.values.data() + rows.begin * w.cols, m, rows.size, w.cols, y);
  }
}

void ApplyLinear(const Linear& w, const float* x, int64_t m, float* y) {
  ApplyLinearRows(w, {0, w.rows}, x, m, y);
}

void LookupRows(const Linear& w, const int32_t* ids, int64_t n, float* out) {
  TP_CHECK(w.parts.empty() && w.type != GgmlType::kF8E4M3);  // one decoded or packed tensor
  if (!w.quantized()) {
    cpu::Embedding(w.values.data(), w.rows, w.cols, ids, n, out);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    TP_CHECK(ids[i] >= 0 && ids[i] < w.rows);
    cpu::DequantizePackedRows(w.packed, ids[i], 1, out + i * w.cols);
  }
}

int64_t ModelWeights::resident_bytes() const {
  int64_t bytes = token_embedding.resident_bytes() + lm_head.resident_bytes() +
                  static_cast<int64_t>(output_norm.size() * sizeof(float));
  for (const LayerWeights& layer : layers) {
    bytes += static_cast<int64_t>((layer.attn_norm.size() + layer.ffn_norm.size() +
                                   layer.qkv_bias.size() + layer.k_cache_scales.size() +
                                   layer.v_cache_scales.size()) *
                                  sizeof(float));
    bytes += layer.qkv.resident_bytes() + layer.attn_output.resident_bytes() +
             layer.gate_up.resident_bytes() + layer.down.resident_bytes();
  }
  return bytes;
}

std::vector<Linear*> ModelWeights::linears() {
  std::vector<Linear*> all = {&token_embedding, &lm_head};
  for (LayerWeights& layer : layers) {
    all.insert(all.end(), {&layer.qkv, &layer.attn_output, &layer.gate_up, &layer.down});
  }
  return all;
}

}  // namespace tpserve
