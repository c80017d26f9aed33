#include "worker/kv_calibration.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/fp8_e4m3.h"
#include "model/gguf_writer.h"
#include "model/hf_fp8.h"
#include "model/model_config.h"
#include "model/shard_layout.h"
#include "worker/comm/single_rank_communicator.h"
#include "worker/cpu_forward_pass.h"
#include "worker/forward_batch.h"
#include "worker/kv_cache.h"
#include "worker/shard_loader.h"

namespace tpserve {
namespace {

constexpr int64_t kBlockSize = 16;

// max |x| / kE4m3Max for each row of `amax` (1 where a head never saw a value other than 0; at
// least FLT_MIN, whose reciprocal the cache writes can still multiply by), or each row's largest
// for all of its heads with `per_layer`.
std::vector<std::vector<float>> ScalesOf(const std::vector<std::vector<float>>& amax,
                                         bool per_layer) {
  std::vector<std::vector<float>> scales;
  for (const std::vector<float>& heads : amax) {
    std::vector<float> row = heads;
    if (per_layer) std::fill(row.begin(), row.end(), *std::max_element(row.begin(), row.end()));
    for (float& x : row) {
      x = x > 0.0f ? std::max(x / cpu::kE4m3Max, std::numeric_limits<float>::min()) : 1.0f;
    }
    scales.push_back(std::move(row));
  }
  return scales;
}

}  // namespace

absl::StatusOr<KvCacheScales> CalibrateKvScales(const GgufFile& file,
                                                absl::Span<const int32_t> tokens,
                                                const KvCalibrationOptions& options) {
  if (tokens.empty()) return absl::InvalidArgumentError("the calibration text has no tokens");
  ASSIGN_OR_RETURN(const ModelConfig config, ModelConfig::FromGguf(file));
  const int64_t first = options.bos_id >= 0 ? 2 : 1;  // BOS and a text token at least
  if (options.chunk_tokens < first || options.chunk_tokens > config.context_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunks of ", options.chunk_tokens, " tokens: between ", first,
                     " and the model's context (", config.context_length, ") are run"));
  }
  ASSIGN_OR_RETURN(const ShardLayout layout, ShardLayout::Make(config, 0, 1));
  ASSIGN_OR_RETURN(
      ModelWeights weights,
      LoadShardWeights(file, config, layout, ShardFormats{options.cpu_weights, false}));
  KvCacheShape shape = KvCacheShape::For(config.num_layers, layout.kv_heads.size, config.head_dim,
                                         kBlockSize, /*cuda=*/false, /*fp8=*/false);
  shape.num_blocks = (options.chunk_tokens + kBlockSize - 1) / kBlockSize;
  SingleRankCommunicator comm;
  CpuForwardPass model(config, layout, std::move(weights), &comm, /*links=*/nullptr, shape);

  const int64_t heads = layout.kv_heads.size;
  const int64_t head_dim = config.head_dim;
  std::vector<std::vector<float>> k_amax(config.num_layers, std::vector<float>(heads, 0.0f));
  std::vector<std::vector<float>> v_amax = k_amax;
  bool finite = true;  // std::max passes NaN by, so it is looked for apart
  model.set_kv_observer([&](int layer, const float* k, const float* v, int64_t n) {
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t g = 0; g < heads; ++g) {
        const int64_t offset = (t * heads + g) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) {
          const float kx = k[offset + d], vx = v[offset + d];
          finite = finite && std::isfinite(kx) && std::isfinite(vx);
          k_amax[layer][g] = std::max(k_amax[layer][g], std::abs(kx));
          v_amax[layer][g] = std::max(v_amax[layer][g], std::abs(vx));
        }
      }
    }
  });

  std::vector<int32_t> table(shape.num_blocks);
  for (int32_t b = 0; b < shape.num_blocks; ++b) table[b] = b;
  std::vector<float> logits;
  std::vector<int32_t> chunk;
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t text_per_chunk = options.chunk_tokens - (options.bos_id >= 0 ? 1 : 0);
  for (int64_t begin = 0; begin < total; begin += text_per_chunk) {
    const int64_t size = std::min(text_per_chunk, total - begin);
    chunk.clear();
    if (options.bos_id >= 0) chunk.push_back(options.bos_id);
    chunk.insert(chunk.end(), tokens.begin() + begin, tokens.begin() + begin + size);
    ForwardBatchBuilder builder(kBlockSize);
    builder.AddSequence(chunk, 0, table, /*all_logits=*/false);
    RETURN_IF_ERROR(model.Forward(builder.Build(), &logits));
    if (!finite) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model's K or V is not finite on the calibration text's tokens ", begin,
                       " to ", begin + size - 1));
    }
    if (options.progress) options.progress(begin + size, total);
  }
  return KvCacheScales{ScalesOf(k_amax, options.per_layer), ScalesOf(v_amax, options.per_layer)};
}

absl::Status WriteWithKvScales(const GgufFile& file, const KvCacheScales& scales,
                               const std::string& path) {
  GgufWriter writer;
  RETURN_IF_ERROR(writer.CopyKeys(file));
  std::set<std::string> replaced;
  for (size_t layer = 0; layer < scales.k.size(); ++layer) {
    replaced.insert(KCacheScaleName(static_cast<int64_t>(layer)));
    replaced.insert(VCacheScaleName(static_cast<int64_t>(layer)));
  }
  for (const GgufTensorInfo& tensor : file.tensors()) {
    if (replaced.contains(tensor.name)) continue;
    RETURN_IF_ERROR(
        writer.AddTensor(tensor.name, tensor.type, tensor.dims, file.TensorData(tensor)));
  }
  for (size_t layer = 0; layer < scales.k.size(); ++layer) {
    const auto l = static_cast<int64_t>(layer);
    for (const auto& [name, values] : {std::pair{KCacheScaleName(l), &scales.k[layer]},
                                       {VCacheScaleName(l), &scales.v[layer]}}) {
      std::vector<uint8_t> bytes(values->size() * sizeof(float));
      std::memcpy(bytes.data(), values->data(), bytes.size());
      RETURN_IF_ERROR(
          writer.AddTensor(name, GgmlType::kF32, {static_cast<int64_t>(values->size())}, bytes));
    }
  }
  return writer.WriteFile(path);
}

}  // namespace tpserve
