// Tensor element types of GGUF files (the numbering of ggml's `ggml_type`) and their block layout.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tpserve {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
  // Not a ggml type: FP8 E4M3 weights of a Hugging Face folder (model/hf_folder.h), one byte an
  // element, each row times its scale (GgufTensorInfo::row_scales). A GGUF file may not use it.
  kF8E4M3 = 1000,
};

struct GgmlTypeTraits {
  std::string_view name;   // "Q4_1"
  int64_t block_elements;  // elements per block (1 for unquantized types)
  int64_t block_bytes;     // bytes per block
};

// Traits of a supported type; nullopt for a type number this build does not decode.
std::optional<GgmlTypeTraits> GetGgmlTypeTraits(uint32_t type);

// ggml's name of a type number, supported here or not ("Q5_K"); "unknown" past ggml's list.
const char* GgmlTypeName(uint32_t type);

}  // namespace tpserve
