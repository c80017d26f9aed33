// The tensor table of a safetensors file (https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets":
// [begin, end]}, ..., "__metadata__": {...}}, then the data, offsets relative to its start.
//
// ParseSafetensors checks everything a reader relies on before returning: the header fits the
// file and is a JSON object of such entries, every dtype is known, every tensor's bytes are
// exactly its shape's and lie inside the data. Errors name the file and the tensor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/ggml_type.h"

namespace tpserve {

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = uint64_t{100} << 20;

struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // "BF16", "F16", "F32", "I64", ...
  std::vector<int64_t> shape;  // row-major: shape.back() is contiguous
  uint64_t begin = 0;          // byte offsets inside the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;  // in the header's order
  absl::Span<const uint8_t> json;          // the header text
  absl::Span<const uint8_t> data;          // the data section
};

// The element type a dtype ("F32", "F16", "BF16", "F8_E4M3") is served as; nullopt for the
// others.
std::optional<GgmlType> GgmlTypeOfDtype(const std::string& dtype);

// The header of the file image `bytes` (named `path` in errors); the spans point into `bytes`.
absl::StatusOr<SafetensorsHeader> ParseSafetensors(absl::Span<const uint8_t> bytes,
                                                   const std::string& path);

}  // namespace tpserve
