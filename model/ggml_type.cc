#include "model/ggml_type.h"

#include <iterator>

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
    case GgmlType::kQ5_K:
      return GgmlTypeTraits{"Q5_K", 256, 2 + 2 + 12 + 32 + 128};  // d, dmin, scales, qh, qs
    case GgmlType::kQ6_K:
      return GgmlTypeTraits{"Q6_K", 256, 128 + 64 + 16 + 2};  // ql, qh, scales[16], d
    case GgmlType::kF8E4M3:
      return GgmlTypeTraits{"F8_E4M3", 1, 1};
  }
  return std::nullopt;
}

const char* GgmlTypeName(uint32_t type) {
  // ggml's numbering (ggml.h enum ggml_type), for types this build refuses too.
  static constexpr const char* kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16"};
  if (type == static_cast<uint32_t>(GgmlType::kF8E4M3)) return "F8_E4M3";
  return type < std::size(kNames) ? kNames[type] : "unknown";
}

}  // namespace tpserve
