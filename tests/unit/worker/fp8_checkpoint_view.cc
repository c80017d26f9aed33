#include "tests/unit/worker/fp8_checkpoint_view.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "kernels/cpu/fp8_matmul.h"
#include "model/dequantize.h"

namespace tpserve::testing {
namespace {

bool IsProjection(const std::string& name) {
  for (const char* part :
       {".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".attn_output.weight",
        ".ffn_gate.weight", ".ffn_up.weight", ".ffn_down.weight"}) {
    if (absl::EndsWith(name, part)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GgufFile>> Fp8CheckpointView(const GgufFile& file, bool per_channel,
                                                            bool fp8_embedding) {
  GgufParts parts;
  parts.display_name = "fp8 view";
  parts.identity = per_channel ? "fp8 per channel" : "fp8 per tensor";
  for (const std::string& key : file.keys()) parts.metadata.emplace_back(key, *file.Find(key));
  for (const GgufTensorInfo& t : file.tensors()) {
    GgufTensorInfo info = t;
    info.offset = 0;
    info.section = static_cast<uint32_t>(parts.owned.size());
    const absl::Span<const uint8_t> bytes = file.TensorData(t);
    if (!IsProjection(t.name) && !(fp8_embedding && t.name == "token_embd.weight")) {
      parts.owned.emplace_back(bytes.begin(), bytes.end());
      parts.tensors.push_back(std::move(info));
      continue;
    }
    const int64_t cols = t.dims[0];
    const int64_t rows = t.num_elements / cols;
    std::vector<float> values(t.num_elements);
    RETURN_IF_ERROR(Dequantize(t.type, bytes, absl::MakeSpan(values)));
    // Per tensor: the whole tensor quantized as one row, so one scale.
    const int64_t scale_rows = per_channel ? rows : 1;
    std::vector<uint8_t> codes(values.size());
    info.row_scales.resize(scale_rows);
    cpu::QuantizeRowsE4m3(values.data(), scale_rows, t.num_elements / scale_rows, codes.data(),
                          info.row_scales.data());
    info.type = GgmlType::kF8E4M3;
    info.num_bytes = codes.size();
    parts.owned.push_back(std::move(codes));
    parts.tensors.push_back(std::move(info));
  }
  return GgufFile::Assemble(std::move(parts));
}

}  // namespace tpserve::testing
