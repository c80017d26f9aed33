#include "worker/shard_loader.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "model/dequantize.h"

namespace tpserve {
namespace {

absl::StatusOr<const GgufTensorInfo*> FindMatrix(const GgufFile& file, const std::string& name,
                                                 int64_t rows, int64_t cols) {
  const GgufTensorInfo* tensor = file.FindTensor(name);
  if (tensor == nullptr) return absl::NotFoundError(absl::StrCat("model has no tensor ", name));
  const bool is_vector = rows == 1;
  const bool matches = is_vector ? (tensor->dims.size() == 1 && tensor->dims[0] == cols)
                                 : (tensor->dims.size() == 2 && tensor->dims[0] == cols &&
                                    tensor->dims[1] == rows);
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has dims [",
                                                   absl::StrJoin(tensor->dims, ", "),
                                                   "], expected [", cols, ", ", rows, "]"));
  }
  return tensor;
}

// Dequantizes rows [rows.begin, rows.end()) of a [*, cols] tensor into `dst`.
absl::Status ReadRows(const GgufFile& file, const GgufTensorInfo& tensor, int64_t cols,
                      Range rows, float* dst) {
  ASSIGN_OR_RETURN(const uint64_t row_bytes, GgmlBytesFor(tensor.type, cols));
  const auto data = file.TensorData(tensor).subspan(rows.begin * row_bytes, rows.size * row_bytes);
  return Dequantize(tensor.type, data, absl::MakeSpan(dst, rows.size * cols));
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

absl::StatusOr<std::vector<float>> LoadVector(const GgufFile& file, const std::string& name,
                                              int64_t size) {
  ASSIGN_OR_RETURN(const GgufTensorInfo* tensor, FindMatrix(file, name, 1, size));
  std::vector<float> out(size);
  RETURN_IF_ERROR(ReadRows(file, *tensor, size, {0, 1}, out.data()));
  return out;
}

absl::StatusOr<LayerWeights> LoadLayer(const GgufFile& file, const ModelConfig& config,
                                       const ShardLayout& layout, int layer) {
  const std::string prefix = absl::StrCat("blk.", layer, ".");
  const int64_t hidden = config.hidden_size;
  const int64_t head_dim = config.head_dim;
  LayerWeights w;
  ASSIGN_OR_RETURN(w.attn_norm, LoadVector(file, prefix + "attn_norm.weight", hidden));
  ASSIGN_OR_RETURN(w.ffn_norm, LoadVector(file, prefix + "ffn_norm.weight", hidden));

  const int64_t q_rows = layout.q_heads.size * head_dim;
  const int64_t kv_rows = layout.kv_heads.size * head_dim;
  w.qkv.resize((q_rows + 2 * kv_rows) * hidden);
  ASSIGN_OR_RETURN(const GgufTensorInfo* wq,
                   FindMatrix(file, prefix + "attn_q.weight", config.num_heads * head_dim, hidden));
  ASSIGN_OR_RETURN(const GgufTensorInfo* wk, FindMatrix(file, prefix + "attn_k.weight",
                                                        config.num_kv_heads * head_dim, hidden));
  ASSIGN_OR_RETURN(const GgufTensorInfo* wv, FindMatrix(file, prefix + "attn_v.weight",
                                                        config.num_kv_heads * head_dim, hidden));
  const Range q_range{layout.q_heads.begin * head_dim, q_rows};
  const Range kv_range{layout.kv_heads.begin * head_dim, kv_rows};
  RETURN_IF_ERROR(ReadRows(file, *wq, hidden, q_range, w.qkv.data()));
  RETURN_IF_ERROR(ReadRows(file, *wk, hidden, kv_range, w.qkv.data() + q_rows * hidden));
  RETURN_IF_ERROR(
      ReadRows(file, *wv, hidden, kv_range, w.qkv.data() + (q_rows + kv_rows) * hidden));

  ASSIGN_OR_RETURN(const GgufTensorInfo* wo, FindMatrix(file, prefix + "attn_output.weight",
                                                        hidden, config.num_heads * head_dim));
  w.attn_output.resize(hidden * q_rows);
  RETURN_IF_ERROR(ReadColumns(file, *wo, hidden, config.num_heads * head_dim, q_range,
                              w.attn_output.data()));

  const int64_t ffn = config.intermediate_size;
  ASSIGN_OR_RETURN(const GgufTensorInfo* gate,
                   FindMatrix(file, prefix + "ffn_gate.weight", ffn, hidden));
  ASSIGN_OR_RETURN(const GgufTensorInfo* up, FindMatrix(file, prefix + "ffn_up.weight", ffn, hidden));
  ASSIGN_OR_RETURN(const GgufTensorInfo* down,
                   FindMatrix(file, prefix + "ffn_down.weight", hidden, ffn));
  w.gate_up.resize(2 * layout.ffn.size * hidden);
  RETURN_IF_ERROR(ReadRows(file, *gate, hidden, layout.ffn, w.gate_up.data()));
  RETURN_IF_ERROR(
      ReadRows(file, *up, hidden, layout.ffn, w.gate_up.data() + layout.ffn.size * hidden));
  w.down.resize(hidden * layout.ffn.size);
  RETURN_IF_ERROR(ReadColumns(file, *down, hidden, ffn, layout.ffn, w.down.data()));
  return w;
}

}  // namespace

absl::StatusOr<ModelWeights> LoadShard(const GgufFile& file, const ModelConfig& config,
                                       const ShardLayout& layout) {
  const int64_t hidden = config.hidden_size;
  ModelWeights weights;
  ASSIGN_OR_RETURN(const GgufTensorInfo* embedding,
                   FindMatrix(file, "token_embd.weight", config.vocab_size, hidden));
  weights.token_embedding.resize(config.vocab_size * hidden);
  RETURN_IF_ERROR(ReadRows(file, *embedding, hidden, {0, config.vocab_size},
                           weights.token_embedding.data()));
  ASSIGN_OR_RETURN(weights.output_norm, LoadVector(file, "output_norm.weight", hidden));
  if (!config.tie_word_embeddings) {
    ASSIGN_OR_RETURN(const GgufTensorInfo* output,
                     FindMatrix(file, "output.weight", config.vocab_size, hidden));
    weights.lm_head.resize(layout.vocab.size * hidden);
    RETURN_IF_ERROR(ReadRows(file, *output, hidden, layout.vocab, weights.lm_head.data()));
  }
  for (int layer = 0; layer < config.num_layers; ++layer) {
    ASSIGN_OR_RETURN(LayerWeights w, LoadLayer(file, config, layout, layer));
    weights.layers.push_back(std::move(w));
    if ((layer + 1) % 10 == 0 || layer + 1 == config.num_layers) {
      LogInfo("loader", "rank %d/%d: loaded layer %d/%d", layout.rank, layout.world_size,
              layer + 1, config.num_layers);
    }
  }
  return weights;
}

}  // namespace tpserve
