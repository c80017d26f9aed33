#include "worker/cuda/device_weights.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/dequantize.h"
#include "kernels/cuda/fp8_quantize.h"

namespace tpserve::cuda {
namespace {

// Raw bytes on the device, grown to the largest tensor and reused, so decoding never needs more
// than one tensor's bytes beside the weights.
class Staging {
 public:
  absl::StatusOr<const uint8_t*> Upload(absl::Span<const uint8_t> bytes, cudaStream_t stream) {
    if (static_cast<int64_t>(bytes.size()) > buffer_.size()) {
      // The previous tensor's decode may still read the old buffer.
      RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "weight upload"));
      buffer_ = DeviceBuffer<uint8_t>();
      ASSIGN_OR_RETURN(buffer_,
                       DeviceBuffer<uint8_t>::Allocate(static_cast<int64_t>(bytes.size())));
    }
    RETURN_IF_ERROR(buffer_.CopyFromHost(bytes, stream));
    return buffer_.data();
  }

 private:
  DeviceBuffer<uint8_t> buffer_;
};

// Decodes `count` elements of `type` held in `bytes` into dst[0, count).
absl::Status DecodeInto(GgmlType type, absl::Span<const uint8_t> bytes, int64_t count, bf16* dst,
                        Staging& staging, cudaStream_t stream) {
  const std::optional<WeightFormat> format = WeightFormatOfGgmlType(static_cast<uint32_t>(type));
  if (!format.has_value()) {  // The CPU loader keeps no other type in blocks.
    return absl::InternalError(
        absl::StrCat("weight type ", static_cast<uint32_t>(type), " reached the device decoder"));
  }
  ASSIGN_OR_RETURN(const uint8_t* src, staging.Upload(bytes, stream));
  DequantizeToBf16(*format, src, count, dst, stream);
  return absl::OkStatus();
}

// Decodes `count` elements of `type` held in `bytes` into a new bf16 buffer.
absl::StatusOr<DeviceBuffer<bf16>> Decode(GgmlType type, absl::Span<const uint8_t> bytes,
                                          int64_t count, Staging& staging, cudaStream_t stream) {
  ASSIGN_OR_RETURN(DeviceBuffer<bf16> out, DeviceBuffer<bf16>::Allocate(count));
  RETURN_IF_ERROR(DecodeInto(type, bytes, count, out.data(), staging, stream));
  return out;
}

absl::Span<const uint8_t> Bytes(const std::vector<float>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float)};
}

absl::StatusOr<DeviceBuffer<bf16>> UploadVector(std::vector<float>& values, Staging& staging,
                                                cudaStream_t stream) {
  if (values.empty()) return DeviceBuffer<bf16>();  // what another pipeline stage holds
  ASSIGN_OR_RETURN(
      DeviceBuffer<bf16> out,
      Decode(GgmlType::kF32, Bytes(values), static_cast<int64_t>(values.size()), staging, stream));
  std::vector<float>().swap(values);  // The staging copy returned once it had finished.
  return out;
}

// `values` as they are (no bf16 rounding), then released.
template <typename T>
absl::StatusOr<DeviceBuffer<T>> UploadExact(std::vector<T>& values, cudaStream_t stream) {
  if (values.empty()) return DeviceBuffer<T>();
  ASSIGN_OR_RETURN(DeviceBuffer<T> out,
                   DeviceBuffer<T>::Allocate(static_cast<int64_t>(values.size())));
  RETURN_IF_ERROR(out.CopyFromHost(values, stream));
  // CopyFromHost returns once the copy has finished.
  std::vector<T>().swap(values);
  return out;
}

absl::StatusOr<DeviceLinear> UploadLinear(Linear& w, Staging& staging, cudaStream_t stream) {
  DeviceLinear out;
  out.rows = w.rows;
  out.cols = w.cols;
  if (w.rows == 0) return out;
  if (w.type == GgmlType::kF8E4M3) {  // an FP8 checkpoint's codes and scales, as they are
    ASSIGN_OR_RETURN(out.fp8, UploadExact(w.fp8, stream));
    ASSIGN_OR_RETURN(out.fp8_scales, UploadExact(w.fp8_scales, stream));
    return out;
  }
  if (w.quantized()) {
    // The GGUF blocks go up and are decoded on the device, part after part for a stack (Q4_K_M's
    // fused qkv: Q4_K q/k rows over Q6_K v rows), each into its rows.
    ASSIGN_OR_RETURN(out.weight, DeviceBuffer<bf16>::Allocate(w.rows * w.cols));
    std::vector<const Linear*> parts;
    if (w.parts.empty()) parts.push_back(&w);
    for (const Linear& part : w.parts) parts.push_back(&part);
    bf16* dst = out.weight.data();
    for (const Linear* part : parts) {
      const std::vector<uint8_t> blocks = cpu::UnpackWeight(part->packed);
      const int64_t count = part->rows * part->cols;
      RETURN_IF_ERROR(DecodeInto(part->type, blocks, count, dst, staging, stream));
      dst += count;
    }
  } else {
    ASSIGN_OR_RETURN(out.weight,
                     Decode(GgmlType::kF32, Bytes(w.values), w.rows * w.cols, staging, stream));
  }
  w.packed = {};  // The staging copy returned once it had finished.
  w.parts.clear();
  std::vector<float>().swap(w.values);
  return out;
}

// `w`'s bf16 weight as E4M3 codes with per-row scales; the bf16 buffer is freed once read.
absl::Status QuantizeToFp8(DeviceLinear& w, cudaStream_t stream) {
  ASSIGN_OR_RETURN(w.fp8, DeviceBuffer<uint8_t>::Allocate(w.rows * w.cols));
  ASSIGN_OR_RETURN(w.fp8_scales, DeviceBuffer<float>::Allocate(w.rows));
  QuantizeRowsE4m3(w.weight.data(), w.rows, w.cols, w.fp8.data(), w.fp8_scales.data(), stream);
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "FP8 weight quantization"));
  w.weight = DeviceBuffer<bf16>();
  return absl::OkStatus();
}

absl::StatusOr<DeviceLinear> UploadLayerLinear(Linear& w, bool fp8, Staging& staging,
                                               cudaStream_t stream) {
  ASSIGN_OR_RETURN(DeviceLinear out, UploadLinear(w, staging, stream));
  if (fp8 && out.rows > 0 && !out.is_fp8()) RETURN_IF_ERROR(QuantizeToFp8(out, stream));
  return out;
}

}  // namespace

int64_t DeviceWeights::bytes() const {
  int64_t total = token_embedding.bytes() + output_norm.bytes() + lm_head.bytes();
  for (const DeviceLayerWeights& l : layers) {
    total += l.attn_norm.bytes() + l.qkv.bytes() + l.qkv_bias.bytes() + l.q_norm.bytes() +
             l.k_norm.bytes() + l.attn_output.bytes() + l.ffn_norm.bytes() +
             l.post_attention_norm.bytes() + l.post_ffw_norm.bytes() + l.gate_up.bytes() +
             l.down.bytes() + l.k_cache_scales.bytes() + l.v_cache_scales.bytes();
  }
  return total;
}

absl::StatusOr<DeviceWeights> UploadWeights(ModelWeights host, bool fp8, cudaStream_t stream) {
  Staging staging;
  DeviceWeights out;
  ASSIGN_OR_RETURN(out.token_embedding, UploadLinear(host.token_embedding, staging, stream));
  ASSIGN_OR_RETURN(out.output_norm, UploadVector(host.output_norm, staging, stream));
  ASSIGN_OR_RETURN(out.lm_head, UploadLinear(host.lm_head, staging, stream));
  ASSIGN_OR_RETURN(out.rope_inv_freq, UploadExact(host.rope_inv_freq, stream));
  ASSIGN_OR_RETURN(out.rope_inv_freq_local, UploadExact(host.rope_inv_freq_local, stream));
  out.layers.reserve(host.layers.size());
  for (LayerWeights& layer : host.layers) {
    DeviceLayerWeights& d = out.layers.emplace_back();
    ASSIGN_OR_RETURN(d.attn_norm, UploadVector(layer.attn_norm, staging, stream));
    ASSIGN_OR_RETURN(d.qkv, UploadLayerLinear(layer.qkv, fp8, staging, stream));
    ASSIGN_OR_RETURN(d.qkv_bias, UploadExact(layer.qkv_bias, stream));
    ASSIGN_OR_RETURN(d.q_norm, UploadVector(layer.q_norm, staging, stream));
    ASSIGN_OR_RETURN(d.k_norm, UploadVector(layer.k_norm, staging, stream));
    ASSIGN_OR_RETURN(d.attn_output, UploadLayerLinear(layer.attn_output, fp8, staging, stream));
    ASSIGN_OR_RETURN(d.ffn_norm, UploadVector(layer.ffn_norm, staging, stream));
    ASSIGN_OR_RETURN(d.post_attention_norm,
                     UploadVector(layer.post_attention_norm, staging, stream));
    ASSIGN_OR_RETURN(d.post_ffw_norm, UploadVector(layer.post_ffw_norm, staging, stream));
    ASSIGN_OR_RETURN(d.gate_up, UploadLayerLinear(layer.gate_up, fp8, staging, stream));
    ASSIGN_OR_RETURN(d.down, UploadLayerLinear(layer.down, fp8, staging, stream));
    ASSIGN_OR_RETURN(d.k_cache_scales, UploadExact(layer.k_cache_scales, stream));
    ASSIGN_OR_RETURN(d.v_cache_scales, UploadExact(layer.v_cache_scales, stream));
  }
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "weight upload"));
  return out;
}

}  // namespace tpserve::cuda
