#include "worker/shard_loader.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/cpu/packed_weight.h"
#include "model/dequantize.h"
#include "model/hf_fp8.h"
#include "model/rope_frequencies.h"

namespace tpserve {
namespace {

absl::StatusOr<const GgufTensorInfo*> FindMatrix(const GgufFile& file, const std::string& name,
                                                 int64_t rows, int64_t cols) {
  const GgufTensorInfo* tensor = file.FindTensor(name);
  if (tensor == nullptr) return absl::NotFoundError(absl::StrCat("model has no tensor ", name));
  const bool is_vector = rows == 1;
  const bool matches =
      is_vector ? (tensor->dims.size() == 1 && tensor->dims[0] == cols)
                : (tensor->dims.size() == 2 && tensor->dims[0] == cols && tensor->dims[1] == rows);
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has dims [",
                                                   absl::StrJoin(tensor->dims, ", "),
                                                   "], expected [", cols, ", ", rows, "]"));
  }
  return tensor;
}

// Row r's scale of an FP8 tensor (GgufTensorInfo::row_scales: one per row, or one for all).
float RowScale(const GgufTensorInfo& tensor, int64_t r) {
  return tensor.row_scales.size() == 1 ? tensor.row_scales[0] : tensor.row_scales[r];
}

// Dequantizes rows [rows.begin, rows.end()) of a [*, cols] tensor into `dst` (an FP8 tensor's
// rows times their scales).
absl::Status ReadRows(const GgufFile& file, const GgufTensorInfo& tensor, int64_t cols, Range rows,
                      float* dst) {
  ASSIGN_OR_RETURN(const uint64_t row_bytes, GgmlBytesFor(tensor.type, cols));
  const auto data = file.TensorData(tensor).subspan(rows.begin * row_bytes, rows.size * row_bytes);
  RETURN_IF_ERROR(Dequantize(tensor.type, data, absl::MakeSpan(dst, rows.size * cols)));
  const std::vector<float>& scales = tensor.row_scales;
  for (int64_t r = 0; r < rows.size && !scales.empty(); ++r) {
    const float scale = RowScale(tensor, rows.begin + r);
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] *= scale;
  }
  return absl::OkStatus();
}

// Dequantizes columns [cols.begin, cols.end()) of every row of a [rows, total_cols] tensor.
// Quantized blocks span columns, so each row is decoded whole and then sliced.
absl::Status ReadColumns(const GgufFile& file, const GgufTensorInfo& tensor, int64_t rows,
                         int64_t total_cols, Range cols, float* dst) {
  std::vector<float> row(total_cols);
  for (int64_t r = 0; r < rows; ++r) {
    RETURN_IF_ERROR(ReadRows(file, tensor, total_cols, {r, 1}, row.data()));
    std::copy(row.begin() + cols.begin, row.begin() + cols.end(), dst + r * cols.size);
  }
  return absl::OkStatus();
}

// One source of rows of a stacked Linear: rows [rows.begin, rows.end()) of `tensor`.
struct RowSlice {
  const GgufTensorInfo* tensor;
  Range rows;
};

// The slices stacked by rows into one [Σ rows, cols] Linear. Column-parallel slices are whole
// rows, so when every slice has the same block type that GEMV reads, its blocks are copied as
// they are; slices of different such types become the parts of a stack; otherwise the rows are
// decoded to fp32.
absl::StatusOr<Linear> LoadRows(const GgufFile& file, const ShardFormats& formats, int64_t cols,
                                absl::Span<const RowSlice> slices) {
  const CpuWeights weights = formats.cpu_weights;
  Linear w;
  w.cols = cols;
  w.type = slices.begin()->tensor->type;
  bool mixed = false;
  bool every_kept = weights != CpuWeights::kFp32;
  for (const RowSlice& slice : slices) {
    w.rows += slice.rows.size;
    mixed = mixed || slice.tensor->type != w.type;
    every_kept = every_kept && KeepsBlocks(slice.tensor->type);
  }
  if (mixed && every_kept) {
    // One part per run of slices of one type: fewer, larger products.
    for (size_t begin = 0, end = 0; begin < slices.size(); begin = end) {
      while (end < slices.size() && slices[end].tensor->type == slices[begin].tensor->type) ++end;
      ASSIGN_OR_RETURN(Linear part,
                       LoadRows(file, formats, cols, slices.subspan(begin, end - begin)));
      w.parts.push_back(std::move(part));
    }
    return w;
  }
  if (!mixed && w.type == GgmlType::kF8E4M3 && formats.keep_fp8) {
    for (const RowSlice& slice : slices) {
      const auto data =
          file.TensorData(*slice.tensor).subspan(slice.rows.begin * cols, slice.rows.size * cols);
      w.fp8.insert(w.fp8.end(), data.begin(), data.end());
      for (int64_t r = slice.rows.begin; r < slice.rows.end(); ++r) {
        w.fp8_scales.push_back(RowScale(*slice.tensor, r));
      }
    }
    return w;
  }
  if (mixed || !every_kept) w.type = GgmlType::kF32;
  if (w.quantized()) {
    ASSIGN_OR_RETURN(const uint64_t row_bytes, GgmlBytesFor(w.type, cols));
    std::vector<uint8_t> blocks;
    blocks.reserve(w.rows * row_bytes);
    for (const RowSlice& slice : slices) {
      const auto data = file.TensorData(*slice.tensor)
                            .subspan(slice.rows.begin * row_bytes, slice.rows.size * row_bytes);
      blocks.insert(blocks.end(), data.begin(), data.end());
    }
    return PackedLinear(w.type, blocks.data(), w.rows, cols);
  }
  w.values.resize(w.rows * cols);
  float* dst = w.values.data();
  for (const RowSlice& slice : slices) {
    RETURN_IF_ERROR(ReadRows(file, *slice.tensor, cols, slice.rows, dst));
    dst += slice.rows.size * cols;
  }
  return w;
}

// Columns [cols.begin, cols.end()) of every row of a [rows, total_cols] tensor (row-parallel).
// When the slice starts and ends on block boundaries each row's blocks in it are copied;
// otherwise the tensor is decoded to fp32.
absl::StatusOr<Linear> LoadColumns(const GgufFile& file, const ShardFormats& formats,
                                   const GgufTensorInfo& tensor, int64_t rows, int64_t total_cols,
                                   Range cols) {
  const CpuWeights weights = formats.cpu_weights;
  Linear w;
  w.rows = rows;
  w.cols = cols.size;
  if (tensor.type == GgmlType::kF8E4M3 && formats.keep_fp8) {
    w.type = GgmlType::kF8E4M3;
    const auto data = file.TensorData(tensor);
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = data.subspan(r * total_cols + cols.begin, cols.size);
      w.fp8.insert(w.fp8.end(), row.begin(), row.end());
      w.fp8_scales.push_back(RowScale(tensor, r));
    }
    return w;
  }
  const std::optional<GgmlTypeTraits> traits =
      GetGgmlTypeTraits(static_cast<uint32_t>(tensor.type));
  const int64_t block = traits.has_value() ? traits->block_elements : 1;
  const bool aligned = cols.begin % block == 0 && cols.size % block == 0;
  if (KeepsBlocks(tensor.type) && aligned && weights != CpuWeights::kFp32) {
    ASSIGN_OR_RETURN(const uint64_t row_bytes, GgmlBytesFor(tensor.type, total_cols));
    ASSIGN_OR_RETURN(const uint64_t skip_bytes, GgmlBytesFor(tensor.type, cols.begin));
    ASSIGN_OR_RETURN(const uint64_t slice_bytes, GgmlBytesFor(tensor.type, cols.size));
    const auto data = file.TensorData(tensor);
    std::vector<uint8_t> blocks;
    blocks.reserve(rows * slice_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = data.subspan(r * row_bytes + skip_bytes, slice_bytes);
      blocks.insert(blocks.end(), row.begin(), row.end());
    }
    return PackedLinear(tensor.type, blocks.data(), rows, cols.size);
  }
  w.values.resize(rows * cols.size);
  RETURN_IF_ERROR(ReadColumns(file, tensor, rows, total_cols, cols, w.values.data()));
  return w;
}

absl::StatusOr<std::vector<float>> LoadVector(const GgufFile& file, const std::string& name,
                                              int64_t size) {
  ASSIGN_OR_RETURN(const GgufTensorInfo* tensor, FindMatrix(file, name, 1, size));
  std::vector<float> out(size);
  RETURN_IF_ERROR(ReadRows(file, *tensor, size, {0, 1}, out.data()));
  return out;
}

// An RMSNorm weight, plus the config's norm_weight_offset (Gemma's 1 + w from a Hugging Face
// folder).
absl::StatusOr<std::vector<float>> LoadNorm(const GgufFile& file, const ModelConfig& config,
                                            const std::string& name, int64_t size) {
  ASSIGN_OR_RETURN(std::vector<float> weight, LoadVector(file, name, size));
  for (float& w : weight) w += config.norm_weight_offset;
  return weight;
}

// The scales an FP8 KV cache stores this layer's K (or V) of the rank's KV heads at: the model's
// `name` tensor, one value for the layer or one per KV head, or 1 where it has none.
absl::StatusOr<std::vector<float>> LoadCacheScales(const GgufFile& file, const std::string& name,
                                                   const ModelConfig& config,
                                                   const ShardLayout& layout) {
  std::vector<float> scales(layout.kv_heads.size, 1.0f);
  const GgufTensorInfo* tensor = file.FindTensor(name);
  if (tensor == nullptr) return scales;
  int64_t count = 1;
  for (const int64_t d : tensor->dims) count *= d;
  if (count != 1 && count != config.num_kv_heads) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " holds ", count,
                                                   " scales: one for the layer or one per KV "
                                                   "head (",
                                                   config.num_kv_heads, ") is read"));
  }
  std::vector<float> all(count);
  RETURN_IF_ERROR(Dequantize(tensor->type, file.TensorData(*tensor), absl::MakeSpan(all)));
  for (const float v : all) {
    // Under FLT_MIN, 1 / scale (what the cache writes multiply by) is infinite.
    if (!std::isfinite(v) || v < std::numeric_limits<float>::min()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", name, " holds the scale ", v, " (finite and at least ",
                       std::numeric_limits<float>::min(), " is read)"));
    }
  }
  for (int64_t g = 0; g < layout.kv_heads.size; ++g) {
    scales[g] = all[count == 1 ? 0 : layout.kv_heads.begin + g];
  }
  return scales;
}

absl::StatusOr<LayerWeights> LoadLayer(const GgufFile& file, const ModelConfig& config,
                                       const ShardLayout& layout, const ShardFormats& formats,
                                       int layer) {
  const std::string prefix = absl::StrCat("blk.", layer, ".");
  const int64_t hidden = config.hidden_size;
  const int64_t head_dim = config.head_dim;
  LayerWeights w;
  ASSIGN_OR_RETURN(w.attn_norm, LoadNorm(file, config, prefix + "attn_norm.weight", hidden));
  ASSIGN_OR_RETURN(w.ffn_norm, LoadNorm(file, config, prefix + "ffn_norm.weight", hidden));
  if (config.block_output_norms) {
    ASSIGN_OR_RETURN(w.post_attention_norm,
                     LoadNorm(file, config, prefix + "post_attention_norm.weight", hidden));
    ASSIGN_OR_RETURN(w.post_ffw_norm,
                     LoadNorm(file, config, prefix + "post_ffw_norm.weight", hidden));
  }
  if (config.qk_norm) {
    ASSIGN_OR_RETURN(w.q_norm, LoadNorm(file, config, prefix + "attn_q_norm.weight", head_dim));
    ASSIGN_OR_RETURN(w.k_norm, LoadNorm(file, config, prefix + "attn_k_norm.weight", head_dim));
  }

  const int64_t q_rows = layout.q_heads.size * head_dim;
  const int64_t kv_rows = layout.kv_heads.size * head_dim;
  const int64_t all_q = config.num_heads * head_dim;
  const int64_t all_kv = config.num_kv_heads * head_dim;
  const Range q_range{layout.q_heads.begin * head_dim, q_rows};
  const Range kv_range{layout.kv_heads.begin * head_dim, kv_rows};
  if (file.FindTensor(prefix + "attn_qkv.weight") != nullptr) {
    // Phi-3: one [q | k | v] matrix; this rank's heads from each part.
    ASSIGN_OR_RETURN(const GgufTensorInfo* wqkv,
                     FindMatrix(file, prefix + "attn_qkv.weight", all_q + 2 * all_kv, hidden));
    ASSIGN_OR_RETURN(w.qkv, LoadRows(file, formats, hidden,
                                     {{wqkv, q_range},
                                      {wqkv, Range{all_q + kv_range.begin, kv_rows}},
                                      {wqkv, Range{all_q + all_kv + kv_range.begin, kv_rows}}}));
  } else {
    ASSIGN_OR_RETURN(const GgufTensorInfo* wq,
                     FindMatrix(file, prefix + "attn_q.weight", all_q, hidden));
    ASSIGN_OR_RETURN(const GgufTensorInfo* wk,
                     FindMatrix(file, prefix + "attn_k.weight", all_kv, hidden));
    ASSIGN_OR_RETURN(const GgufTensorInfo* wv,
                     FindMatrix(file, prefix + "attn_v.weight", all_kv, hidden));
    ASSIGN_OR_RETURN(
        w.qkv, LoadRows(file, formats, hidden, {{wq, q_range}, {wk, kv_range}, {wv, kv_range}}));
  }
  if (config.qkv_bias) {
    // Column-parallel like their weights: this rank's heads' entries, stacked as qkv's rows.
    w.qkv_bias.reserve(w.qkv.rows);
    for (const auto& [name, heads, range] :
         {std::tuple{"attn_q.bias", config.num_heads, q_range},
          std::tuple{"attn_k.bias", config.num_kv_heads, kv_range},
          std::tuple{"attn_v.bias", config.num_kv_heads, kv_range}}) {
      ASSIGN_OR_RETURN(const std::vector<float> bias,
                       LoadVector(file, prefix + name, heads * head_dim));
      w.qkv_bias.insert(w.qkv_bias.end(), bias.begin() + range.begin, bias.begin() + range.end());
    }
  }

  ASSIGN_OR_RETURN(const GgufTensorInfo* wo, FindMatrix(file, prefix + "attn_output.weight", hidden,
                                                        config.num_heads * head_dim));
  ASSIGN_OR_RETURN(w.attn_output,
                   LoadColumns(file, formats, *wo, hidden, config.num_heads * head_dim, q_range));

  const int64_t ffn = config.intermediate_size;
  ASSIGN_OR_RETURN(const GgufTensorInfo* down,
                   FindMatrix(file, prefix + "ffn_down.weight", hidden, ffn));
  if (file.FindTensor(prefix + "ffn_gate.weight") == nullptr && config.architecture == "phi3") {
    // Phi-3: ffn_up holds [gate | up], 2 * ffn rows; this rank's columns of each half.
    ASSIGN_OR_RETURN(const GgufTensorInfo* gate_up,
                     FindMatrix(file, prefix + "ffn_up.weight", 2 * ffn, hidden));
    ASSIGN_OR_RETURN(w.gate_up, LoadRows(file, formats, hidden,
                                         {{gate_up, layout.ffn},
                                          {gate_up, Range{ffn + layout.ffn.begin, layout.ffn.size}}}));
  } else {
    ASSIGN_OR_RETURN(const GgufTensorInfo* gate,
                     FindMatrix(file, prefix + "ffn_gate.weight", ffn, hidden));
    ASSIGN_OR_RETURN(const GgufTensorInfo* up,
                     FindMatrix(file, prefix + "ffn_up.weight", ffn, hidden));
    ASSIGN_OR_RETURN(w.gate_up,
                     LoadRows(file, formats, hidden, {{gate, layout.ffn}, {up, layout.ffn}}));
  }
  ASSIGN_OR_RETURN(w.down, LoadColumns(file, formats, *down, hidden, ffn, layout.ffn));
  ASSIGN_OR_RETURN(w.k_cache_scales, LoadCacheScales(file, KCacheScaleName(layer), config, layout));
  ASSIGN_OR_RETURN(w.v_cache_scales, LoadCacheScales(file, VCacheScaleName(layer), config, layout));
  return w;
}

// Bytes of the file's tensors of the layers in `layers` ("blk.N.", indexed from layers.begin), and
// of those of no layer that `reads` says are read. The other layers (a model cut to its first
// layers: self-speculation's draft; another pipeline stage's) are not read.
struct TensorBytes {
  std::vector<int64_t> layers;
  int64_t other = 0;
};

TensorBytes CountTensorBytes(const GgufFile& file, Range layers,
                             const std::function<bool(const std::string&)>& reads) {
  TensorBytes bytes;
  bytes.layers.assign(layers.size, 0);
  for (const GgufTensorInfo& tensor : file.tensors()) {
    const int64_t size = static_cast<int64_t>(file.TensorData(tensor).size());
    int layer = -1;
    if (std::sscanf(tensor.name.c_str(), "blk.%d.", &layer) != 1) {
      if (reads(tensor.name)) bytes.other += size;
    } else if (layer >= layers.begin && layer < layers.end()) {
      bytes.layers[layer - layers.begin] += size;
    }
  }
  return bytes;
}

}  // namespace

absl::StatusOr<ModelWeights> LoadShardWeights(const GgufFile& file, const ModelConfig& config,
                                              const ShardLayout& layout, const ShardFormats& asked,
                                              const LoadProgressFn& progress) {
  const bool embedding = layout.holds_embedding(config.tie_word_embeddings);
  const TensorBytes bytes = CountTensorBytes(file, layout.layers, [&](const std::string& name) {
    if (name == "token_embd.weight") return embedding;
    if (name == "output.weight" || name == "output_norm.weight") return layout.last_stage();
    return true;
  });
  const int64_t total =
      bytes.other + std::accumulate(bytes.layers.begin(), bytes.layers.end(), int64_t{0});
  int64_t done = 0;
  const int64_t hidden = config.hidden_size;
  const ShardFormats formats{ResolveCpuWeights(asked.cpu_weights, config), asked.keep_fp8};
  // The embedding and output head are read as the CPU keeps them, FP8 or not: they are no FP8
  // products on either device.
  const ShardFormats decoded{formats.cpu_weights, /*keep_fp8=*/false};
  ModelWeights out;
  if (embedding) {
    ASSIGN_OR_RETURN(const GgufTensorInfo* embedding,
                     FindMatrix(file, "token_embd.weight", config.vocab_size, hidden));
    ASSIGN_OR_RETURN(out.token_embedding,
                     LoadRows(file, decoded, hidden, {{embedding, {0, config.vocab_size}}}));
  }
  ASSIGN_OR_RETURN(out.rope_inv_freq, RopeInverseFrequencies(file, config));
  if (config.local_layer_period > 0) out.rope_inv_freq_local = LocalRopeInverseFrequencies(config);
  if (layout.last_stage()) {
    ASSIGN_OR_RETURN(out.output_norm, LoadNorm(file, config, "output_norm.weight", hidden));
  }
  if (layout.last_stage() && !config.tie_word_embeddings) {
    ASSIGN_OR_RETURN(const GgufTensorInfo* output,
                     FindMatrix(file, "output.weight", config.vocab_size, hidden));
    ASSIGN_OR_RETURN(out.lm_head, LoadRows(file, decoded, hidden, {{output, layout.vocab}}));
  }
  done += bytes.other;
  if (progress) progress(done, total);
  int scaled_layers = 0;
  for (int layer = layout.layers.begin; layer < layout.layers.end(); ++layer) {
    scaled_layers += file.FindTensor(KCacheScaleName(layer)) != nullptr ||
                     file.FindTensor(VCacheScaleName(layer)) != nullptr;
    ASSIGN_OR_RETURN(LayerWeights w, LoadLayer(file, config, layout, formats, layer));
    out.layers.push_back(std::move(w));
    done += bytes.layers[layer - layout.layers.begin];
    if (progress) progress(done, total);
    if ((layer + 1) % 10 == 0 || layer + 1 == layout.layers.end()) {
      LogInfo("loader", "rank %d/%d: loaded layer %d/%d", layout.rank, layout.world_size, layer + 1,
              config.num_layers);
    }
  }
  if (formats.cpu_weights == CpuWeights::kPacked16) {
    for (Linear* w : out.linears()) w->activation_bits = cpu::ActivationBits::k16;
  }
  if (scaled_layers > 0) {
    LogInfo("loader",
            "rank %d/%d: KV-cache scales from the model for %d of %d layers (1 for the "
            "rest); an FP8 KV cache stores K and V at them",
            layout.rank, layout.world_size, scaled_layers, layout.layers.size);
  }
  return out;
}

}  // namespace tpserve
