// ggml's block encodings of fp32 values: the writing side of model/dequantize.h, for tools that
// write model files (tpserve-mkmodel's random models, tpserve-quantize's re-encoded copies).
//
// Round-to-nearest encoders: valid blocks near the values, not llama.cpp's searched scales (what
// the tools need is files of these types whose weights decode close to the originals).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "model/ggml_type.h"

namespace tpserve {

// Whether EncodeBlocks writes `type`: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K.
bool CanEncode(GgmlType type);

// `values` in `type`'s blocks; values.size() must be a whole number of its blocks, and `type` one
// CanEncode accepts (any other is written as F32).
std::vector<uint8_t> EncodeBlocks(absl::Span<const float> values, GgmlType type);

}  // namespace tpserve
