// GGUF weights decoded to bf16 on the device (CUDA). Weights are uploaded as the raw GGUF blocks
// and decoded here, so the host never holds a dequantized copy.
//
// Each element is computed with the float operations, in the order, of model/dequantize.h (and
// ggml's reference dequantize_row_*), contraction into FMA excluded, and then rounded to bf16
// once (round to nearest even): the result is exactly ToBf16(the CPU decoder's fp32 value).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "kernels/cuda/bf16.h"

namespace tpserve::cuda {

// The GGUF tensor types decoded on the device, numbered as ggml's `ggml_type` (and
// model/ggml_type.h's GgmlType).
//   F32, F16, BF16: one element per "block" (4, 2, 2 bytes)
//   Q4_0: fp16 d, qs[16]           (18 bytes / 32)  w = ((q & 0xF) - 8) * d
//   Q4_1: fp16 d, fp16 m, qs[16]   (20 bytes / 32)  w = (q & 0xF) * d + m
//   Q8_0: fp16 d, int8 qs[32]      (34 bytes / 32)  w = q * d
//   Q4_K: fp16 d, fp16 dmin, scales[12], qs[128]            (144 bytes / 256)
//   Q5_K: fp16 d, fp16 dmin, scales[12], qh[32], qs[128]    (176 bytes / 256)
//         w = (d * scale) * q - (dmin * min), 6-bit scale and min per 32 elements
//   Q6_K: ql[128], qh[64], int8 scales[16], fp16 d          (210 bytes / 256)
//         w = (d * scale) * (q - 32), one scale per 16 elements
// In Q4_x, element j < 16 is the low nibble of qs[j] and element j + 16 its high nibble; the
// K-quants' bit layouts are model/dequantize.cc's.
enum class WeightFormat : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// The WeightFormat of a ggml type number, or nullopt when the device cannot decode it.
inline std::optional<WeightFormat> WeightFormatOfGgmlType(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 8:
    case 12:
    case 13:
    case 14:
    case 30:
      return static_cast<WeightFormat>(ggml_type);
    default:
      return std::nullopt;
  }
}

// Elements per block (32 for Q4_0, Q4_1, Q8_0, 256 for the K-quants, 1 otherwise) and bytes
// per block.
int64_t BlockElements(WeightFormat format);
int64_t BlockBytes(WeightFormat format);

// dst[i] = bf16(decode(src)[i]) for i in [0, num_elements), queued on `stream`; device pointers.
//   src: num_elements / BlockElements(format) blocks, BlockBytes(format) each, packed as in the
//        GGUF file; any alignment (read byte by byte).
//   num_elements: a multiple of BlockElements(format) (the GGUF reader has checked the tensor).
//   dst: [num_elements]; must not overlap src.
void DequantizeToBf16(WeightFormat format, const uint8_t* src, int64_t num_elements, bf16* dst,
                      cudaStream_t stream);

}  // namespace tpserve::cuda
