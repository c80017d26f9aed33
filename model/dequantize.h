// GGUF block formats decoded to fp32, following the block layouts of ggml-common.h.
//
// Decoding is bit-exact with ggml's reference dequantize_row_* functions: each element is
// computed with the same float operations in the same order.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/ggml_type.h"

namespace tpserve {

// Decodes `dst.size()` elements of `type` from `src`. The element count must be a whole number of
// blocks and `src` must hold exactly those blocks; otherwise INVALID_ARGUMENT naming the sizes.
// Single-threaded; callers split large tensors by rows (whole blocks) to go parallel.
absl::Status Dequantize(GgmlType type, absl::Span<const uint8_t> src, absl::Span<float> dst);

// Bytes that `num_elements` of `type` occupy; INVALID_ARGUMENT when not a whole number of blocks
// (or negative, or the type is unknown), OUT_OF_RANGE when the size overflows 64 bits.
absl::StatusOr<uint64_t> GgmlBytesFor(GgmlType type, int64_t num_elements);

// IEEE half (binary16) and bfloat16 bit patterns to float; exact for every input, NaN and
// infinities included.
float Fp16ToFp32(uint16_t bits);
float Bf16ToFp32(uint16_t bits);

}  // namespace tpserve
