// Serializes metadata and tensors into a GGUF v3 image that GgufFile reads back.
//
// Keys are written in the order they were first set; tensors in the order they were added, each
// tensor's data at the next offset that is a multiple of the alignment. Used by tests to build
// files and by tools that write model files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/ggml_type.h"
#include "model/gguf_file.h"

namespace tpserve {

class GgufWriter {
 public:
  GgufWriter() = default;

  // Sets `key`; setting a key again replaces its value and keeps its position. `value.type` must
  // match the alternative held (integers widened to uint64_t/int64_t, floats to double), as
  // GgufFile produces them.
  void SetValue(std::string key, GgufValue value);
  void SetUint32(std::string key, uint32_t value);
  void SetInt32(std::string key, int32_t value);
  void SetUint64(std::string key, uint64_t value);
  void SetFloat32(std::string key, float value);
  void SetBool(std::string key, bool value);
  void SetString(std::string key, std::string value);
  void SetStringArray(std::string key, const std::vector<std::string>& values);
  void SetInt32Array(std::string key, const std::vector<int32_t>& values);
  void SetFloat32Array(std::string key, const std::vector<float>& values);

  // Sets `general.alignment`; INVALID_ARGUMENT unless a power of two in [1, kGgufMaxAlignment].
  absl::Status SetAlignment(uint32_t alignment);

  // Sets every key of `file` (its alignment only where it has one: the others are at GGUF's
  // default of 32), for a tool that rewrites a model.
  absl::Status CopyKeys(const GgufFile& file);

  // Adds a tensor with ggml-order `dims` (dims[0] innermost). INVALID_ARGUMENT naming the tensor
  // for a duplicate name, more than kGgufMaxDims dims, dims[0] not a whole number of blocks, or
  // `data` not exactly the bytes those elements occupy. The data is copied.
  absl::Status AddTensor(std::string name, GgmlType type, std::vector<int64_t> dims,
                         absl::Span<const uint8_t> data);

  // The metadata set so far, in file order (GgufParts takes it for a model assembled from other
  // files).
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }

  // The whole file image.
  std::vector<uint8_t> Serialize() const;
  // Writes Serialize() to `path`, replacing it; errors name the path.
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
  };

  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;  // in file order
  absl::flat_hash_map<std::string, size_t> metadata_index_;
  std::vector<Tensor> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace tpserve
