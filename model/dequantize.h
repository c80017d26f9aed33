// GGUF block formats decoded to fp32, following the block layouts of ggml-common.h.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/ggml_type.h"

namespace tpserve {

// Decodes `dst.size()` elements of `type` from `src`. The element count must be a whole number of
// blocks and `src` must hold exactly those blocks; otherwise INVALID_ARGUMENT naming the sizes.
absl::Status Dequantize(GgmlType type, absl::Span<const uint8_t> src, absl::Span<float> dst);

// Bytes that `num_elements` of `type` occupy; INVALID_ARGUMENT when not a whole number of blocks.
absl::StatusOr<uint64_t> GgmlBytesFor(GgmlType type, int64_t num_elements);

}  // namespace tpserve
