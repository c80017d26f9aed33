// Read-only view of a GGUF v3 file over mmap
// (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
//
// Open() validates the whole header, metadata and tensor table before returning: every length
// and count is checked against the bytes left in the file before anything is reserved, every
// tensor's data range lies inside the data section, so later accessors never read out of bounds.
// Versions 2 and 3 are read (same layout); the file must be little-endian. Errors are one line
// naming the file, the field and its byte offset, e.g. "gguf: m.gguf: tensor
// 'blk.0.attn_q.weight' offset at offset 1234: 97 is not a multiple of the alignment 32".
// Names read from the file appear C-escaped and cut at 96 bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/ggml_type.h"
#include "model/mapped_file.h"

namespace tpserve {

// Limits that keep a hostile file from exhausting memory or stack.
inline constexpr int kGgufMaxArrayDepth = 3;  // arrays of arrays of arrays, no deeper
inline constexpr uint64_t kGgufMaxMetadataValues = uint64_t{1} << 22;  // array elements, in total
inline constexpr int kGgufMaxDims = 4;
inline constexpr uint64_t kGgufMaxAlignment = uint64_t{1} << 30;

// GGUF metadata value types (gguf_metadata_value_type).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

struct GgufValue;
struct GgufArray {
  GgufValueType element_type;
  std::vector<GgufValue> values;
};

// One metadata value, widened: unsigned integers to uint64_t, signed to int64_t, float32 and
// float64 to double. `type` keeps the type the file declared.
struct GgufValue {
  GgufValueType type;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> value;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (innermost) dimension
  GgmlType type;
  uint64_t offset;     // relative to the start of its data section
  uint64_t num_bytes;  // bytes of data
  int64_t num_elements;
  uint32_t section = 0;  // which data section holds it: 0 in a GGUF file (see GgufParts)
  // kF8E4M3 only: each row's scale (row r's values are its codes' values times row_scales[r]),
  // or one scale for every row.
  std::vector<float> row_scales;
  int64_t rows() const;  // product of dims[1..]
};

// A model held in other files (a Hugging Face folder: model/hf_folder.h), as the GGUF file
// llama.cpp's converter would write from them, for GgufFile::Assemble.
struct GgufParts {
  std::string display_name;
  std::vector<std::pair<std::string, GgufValue>> metadata;  // in key order
  // Each tensor's name, dims, type, offset and section; Assemble derives the rest.
  std::vector<GgufTensorInfo> tensors;
  // Data sections: spans of `mappings`, then (in order) each of `owned` whole.
  std::vector<absl::Span<const uint8_t>> sections;
  std::vector<std::unique_ptr<MappedFile>> mappings;
  std::vector<std::vector<uint8_t>> owned;  // tensors computed at load (llama3 RoPE factors)
  // Stands in for header_bytes(): bytes that identify the model (its configuration and the
  // tensor tables), for the fingerprint check across ranks.
  std::string identity;
};

class GgufFile {
 public:
  // Maps and validates the file. Every error is INVALID_ARGUMENT with a one-line message naming
  // the field and its byte offset, except the mapping's own errors (see MappedFile::Open).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (used by tests that build corrupt files); `bytes` must outlive it.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(absl::Span<const uint8_t> bytes,
                                                         std::string display_name);
  // The view of `parts`. INVALID_ARGUMENT naming the key or tensor for a repeated key or name,
  // a section that does not exist, more than kGgufMaxDims dims, a type this build does not
  // decode, or data that is not the bytes its dims occupy inside its section.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Assemble(GgufParts parts);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Bytes of the file, or of every file an assembled model maps.
  uint64_t file_size() const { return file_size_; }
  // Bytes of the header, metadata and tensor table (an assembled model's identity): hashing them
  // identifies the model.
  absl::Span<const uint8_t> header_bytes() const { return header_; }

  const GgufValue* Find(std::string_view key) const;
  // Typed getters: NOT_FOUND when absent, INVALID_ARGUMENT naming the key when of another type.
  // Integer getters accept any integer type whose value fits.
  absl::StatusOr<uint64_t> GetUint(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;  // float32 or float64
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;
  const std::vector<std::string>& keys() const { return keys_; }  // in file order

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The tensor's bytes inside the mapping; valid while this GgufFile lives.
  absl::Span<const uint8_t> TensorData(const GgufTensorInfo& tensor) const;

 private:
  friend class GgufParser;  // fills the fields below; defined in gguf_file.cc
  GgufFile() = default;

  std::vector<std::unique_ptr<MappedFile>> mappings_;  // none for Parse()
  std::vector<std::vector<uint8_t>> owned_;
  std::string identity_;
  absl::Span<const uint8_t> bytes_;  // the GGUF image; empty when assembled
  absl::Span<const uint8_t> header_;
  uint64_t file_size_ = 0;
  std::vector<absl::Span<const uint8_t>> sections_;
  std::string display_name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::string> keys_;
  absl::flat_hash_map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace tpserve
