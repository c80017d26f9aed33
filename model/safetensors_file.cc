#include "model/safetensors_file.h"

#include <cstring>
#include <limits>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

// Bytes per element of each dtype the format defines.
int64_t DtypeBytes(absl::string_view dtype) {
  static const auto* const kBytes = new absl::flat_hash_map<absl::string_view, int64_t>{
      {"F64", 8}, {"I64", 8}, {"U64", 8},  {"F32", 4},     {"I32", 4},
      {"U32", 4}, {"F16", 2}, {"BF16", 2}, {"I16", 2},     {"U16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = kBytes->find(dtype);
  return it == kBytes->end() ? 0 : it->second;
}

// A name from the file, escaped and cut so that an error line stays one short line.
std::string Quoted(absl::string_view name) {
  constexpr size_t kMaxChars = 96;
  std::string escaped = absl::CHexEscape(name.substr(0, kMaxChars));
  if (name.size() > kMaxChars) escaped += "...";
  return absl::StrCat("'", escaped, "'");
}

}  // namespace

absl::StatusOr<SafetensorsHeader> ParseSafetensors(absl::Span<const uint8_t> bytes,
                                                   const std::string& path) {
  const auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: ", path, ": ", what));
  };
  if (bytes.size() < 8) return error("shorter than the 8-byte header length");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);  // little-endian, as the hosts we build for
  if (header_bytes > bytes.size() - 8 || header_bytes > kSafetensorsMaxHeaderBytes) {
    return error(absl::StrCat("header length ", header_bytes, " exceeds the file (", bytes.size(),
                              " bytes) or ", kSafetensorsMaxHeaderBytes));
  }
  SafetensorsHeader header;
  header.json = bytes.subspan(8, header_bytes);
  header.data = bytes.subspan(8 + header_bytes);
  const nlohmann::json json = nlohmann::json::parse(header.json.begin(), header.json.end(),
                                                    /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return error("header is not a JSON object");
  for (const auto& item : json.items()) {
    // Named, not structured bindings: clang 14 (the fuzz build) cannot capture those in lambdas.
    const std::string& name = item.key();
    const nlohmann::json& entry = item.value();
    if (name == "__metadata__") continue;
    const auto tensor_error = [&](absl::string_view what) {
      return error(absl::StrCat("tensor ", Quoted(name), ": ", what));
    };
    if (!entry.is_object()) return tensor_error("entry is not an object");
    const auto dtype = entry.find("dtype");
    const auto shape = entry.find("shape");
    const auto offsets = entry.find("data_offsets");
    if (dtype == entry.end() || !dtype->is_string()) return tensor_error("dtype is not a string");
    if (shape == entry.end() || !shape->is_array() || shape->size() > 8) {
      return tensor_error("shape is not an array of at most 8 sizes");
    }
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return tensor_error("data_offsets is not [begin, end]");
    }
    SafetensorsTensor t;
    t.name = name;
    t.dtype = dtype->get<std::string>();
    const int64_t element_bytes = DtypeBytes(t.dtype);
    if (element_bytes == 0) return tensor_error(absl::StrCat("unknown dtype ", Quoted(t.dtype)));
    uint64_t elements = 1;
    for (const auto& size : *shape) {
      if (!size.is_number_unsigned()) return tensor_error("a shape entry is not a size");
      const uint64_t n = size.get<uint64_t>();
      if (n > uint64_t{std::numeric_limits<int64_t>::max()} ||
          (n != 0 && elements > (uint64_t{1} << 56) / n)) {
        return tensor_error("shape overflows");
      }
      elements *= n;
      t.shape.push_back(static_cast<int64_t>(n));
    }
    t.begin = (*offsets)[0].get<uint64_t>();
    t.end = (*offsets)[1].get<uint64_t>();
    if (t.begin > t.end || t.end > header.data.size()) {
      return tensor_error(absl::StrCat("data_offsets [", t.begin, ", ", t.end,
                                       "] lie outside the data (", header.data.size(),
                                       " bytes): the file is truncated or corrupt"));
    }
    if (t.end - t.begin != elements * static_cast<uint64_t>(element_bytes)) {
      return tensor_error(absl::StrCat(t.end - t.begin, " bytes of data, but its shape and ",
                                       t.dtype, " make ", elements * element_bytes));
    }
    header.tensors.push_back(std::move(t));
  }
  return header;
}

std::optional<GgmlType> GgmlTypeOfDtype(const std::string& dtype) {
  if (dtype == "F32") return GgmlType::kF32;
  if (dtype == "F16") return GgmlType::kF16;
  if (dtype == "BF16") return GgmlType::kBF16;
  if (dtype == "F8_E4M3") return GgmlType::kF8E4M3;
  return std::nullopt;
}

}  // namespace tpserve
