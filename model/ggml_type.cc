#include "model/ggml_type.h"

namespace tpserve {

std::optional<GgmlTypeTraits> GetGgmlTypeTraits(uint32_t type) {
  // Block sizes follow ggml-common.h: QK4_0 = QK4_1 = QK8_0 = 32 and QK_K = 256.
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return GgmlTypeTraits{"F32", 1, 4};
    case GgmlType::kF16:
      return GgmlTypeTraits{"F16", 1, 2};
    case GgmlType::kBF16:
      return GgmlTypeTraits{"BF16", 1, 2};
    case GgmlType::kQ4_0:
      return GgmlTypeTraits{"Q4_0", 32, 2 + 16};  // d, qs[16]
    case GgmlType::kQ4_1:
      return GgmlTypeTraits{"Q4_1", 32, 2 + 2 + 16};  // d, m, qs[16]
    case GgmlType::kQ8_0:
      return GgmlTypeTraits{"Q8_0", 32, 2 + 32};  // d, qs[32]
    case GgmlType::kQ4_K:
      return GgmlTypeTraits{"Q4_K", 256, 2 + 2 + 12 + 128};  // d, dmin, scales[12], qs[128]
    case GgmlType::kQ6_K:
      return GgmlTypeTraits{"Q6_K", 256, 128 + 64 + 16 + 2};  // ql, qh, scales[16], d
  }
  return std::nullopt;
}

}  // namespace tpserve
