#include "model/gguf_writer.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "model/dequantize.h"

namespace tpserve {
namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>* out) : out_(out) {}

  template <typename T>
  void Put(T value) {
    const size_t at = out_->size();
    out_->resize(at + sizeof(T));
    std::memcpy(out_->data() + at, &value, sizeof(T));
  }
  void PutBytes(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    out_->insert(out_->end(), p, p + size);
  }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    PutBytes(s.data(), s.size());
  }
  void PadTo(uint64_t alignment) {
    out_->resize((out_->size() + alignment - 1) / alignment * alignment);
  }

  void PutValue(const GgufValue& v) {
    switch (v.type) {
      case GgufValueType::kUint8:
        return Put(static_cast<uint8_t>(std::get<uint64_t>(v.value)));
      case GgufValueType::kInt8:
        return Put(static_cast<int8_t>(std::get<int64_t>(v.value)));
      case GgufValueType::kUint16:
        return Put(static_cast<uint16_t>(std::get<uint64_t>(v.value)));
      case GgufValueType::kInt16:
        return Put(static_cast<int16_t>(std::get<int64_t>(v.value)));
      case GgufValueType::kUint32:
        return Put(static_cast<uint32_t>(std::get<uint64_t>(v.value)));
      case GgufValueType::kInt32:
        return Put(static_cast<int32_t>(std::get<int64_t>(v.value)));
      case GgufValueType::kUint64:
        return Put(std::get<uint64_t>(v.value));
      case GgufValueType::kInt64:
        return Put(std::get<int64_t>(v.value));
      case GgufValueType::kFloat32:
        return Put(static_cast<float>(std::get<double>(v.value)));
      case GgufValueType::kFloat64:
        return Put(std::get<double>(v.value));
      case GgufValueType::kBool:
        return Put<uint8_t>(std::get<bool>(v.value) ? 1 : 0);
      case GgufValueType::kString:
        return PutString(std::get<std::string>(v.value));
      case GgufValueType::kArray: {
        const GgufArray& array = std::get<GgufArray>(v.value);
        Put(static_cast<uint32_t>(array.element_type));
        Put<uint64_t>(array.values.size());
        for (const GgufValue& element : array.values) {
          TP_CHECK(element.type == array.element_type);
          PutValue(element);
        }
        return;
      }
    }
    TP_CHECK_MSG(false, "unknown GgufValueType");
  }

 private:
  std::vector<uint8_t>* out_;
};

template <typename T, typename Widened>
GgufValue MakeArray(GgufValueType element_type, const std::vector<T>& values) {
  GgufArray array{element_type, {}};
  array.values.reserve(values.size());
  for (const T& v : values) array.values.push_back(GgufValue{element_type, Widened(v)});
  return GgufValue{GgufValueType::kArray, std::move(array)};
}

}  // namespace

void GgufWriter::SetValue(std::string key, GgufValue value) {
  auto it = metadata_index_.find(key);
  if (it != metadata_index_.end()) {
    metadata_[it->second].second = std::move(value);
    return;
  }
  metadata_index_.emplace(key, metadata_.size());
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::SetUint32(std::string key, uint32_t value) {
  SetValue(std::move(key), GgufValue{GgufValueType::kUint32, uint64_t{value}});
}
void GgufWriter::SetInt32(std::string key, int32_t value) {
  SetValue(std::move(key), GgufValue{GgufValueType::kInt32, int64_t{value}});
}
void GgufWriter::SetUint64(std::string key, uint64_t value) {
  SetValue(std::move(key), GgufValue{GgufValueType::kUint64, value});
}
void GgufWriter::SetFloat32(std::string key, float value) {
  SetValue(std::move(key), GgufValue{GgufValueType::kFloat32, double{value}});
}
void GgufWriter::SetBool(std::string key, bool value) {
  SetValue(std::move(key), GgufValue{GgufValueType::kBool, value});
}
void GgufWriter::SetString(std::string key, std::string value) {
  SetValue(std::move(key), GgufValue{GgufValueType::kString, std::move(value)});
}
void GgufWriter::SetStringArray(std::string key, const std::vector<std::string>& values) {
  SetValue(std::move(key), MakeArray<std::string, std::string>(GgufValueType::kString, values));
}
void GgufWriter::SetInt32Array(std::string key, const std::vector<int32_t>& values) {
  SetValue(std::move(key), MakeArray<int32_t, int64_t>(GgufValueType::kInt32, values));
}
void GgufWriter::SetFloat32Array(std::string key, const std::vector<float>& values) {
  SetValue(std::move(key), MakeArray<float, double>(GgufValueType::kFloat32, values));
}

absl::Status GgufWriter::SetAlignment(uint32_t alignment) {
  if (!std::has_single_bit(alignment) || alignment > kGgufMaxAlignment) {
    return absl::InvalidArgumentError(absl::StrCat("gguf writer: alignment ", alignment,
                                                   " is not a power of two in [1, ",
                                                   kGgufMaxAlignment, "]"));
  }
  alignment_ = alignment;
  SetUint32("general.alignment", alignment);
  return absl::OkStatus();
}

absl::Status GgufWriter::CopyKeys(const GgufFile& file) {
  for (const std::string& key : file.keys()) {
    if (key == "general.alignment") continue;  // SetAlignment writes it
    SetValue(key, *file.Find(key));
  }
  if (file.Find("general.alignment") == nullptr) return absl::OkStatus();
  return SetAlignment(static_cast<uint32_t>(file.alignment()));
}

absl::Status GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<int64_t> dims,
                                   absl::Span<const uint8_t> data) {
  const std::string what = absl::StrCat("gguf writer: tensor '", name, "'");
  if (tensor_index_.contains(name)) return absl::InvalidArgumentError(what + ": duplicate name");
  if (dims.size() > static_cast<size_t>(kGgufMaxDims)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", dims.size(), " dims, at most ", kGgufMaxDims));
  }
  const std::optional<GgmlTypeTraits> traits = GetGgmlTypeTraits(static_cast<uint32_t>(type));
  if (!traits.has_value()) return absl::InvalidArgumentError(what + ": unsupported type");
  int64_t elements = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d != 0 && elements > std::numeric_limits<int64_t>::max() / d)) {
      return absl::InvalidArgumentError(what + ": dims are negative or overflow int64");
    }
    elements *= d;
  }
  if (!dims.empty() && dims[0] % traits->block_elements != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": dims[0] = ", dims[0], " is not a multiple of the ",
                     std::string(traits->name), " block of ", traits->block_elements));
  }
  absl::StatusOr<uint64_t> bytes = GgmlBytesFor(type, elements);
  if (!bytes.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes.status().message()));
  if (data.size() != *bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": data has ", data.size(), " bytes, want ", *bytes));
  }
  tensor_index_.emplace(name, tensors_.size());
  tensors_.push_back(Tensor{std::move(name), type, std::move(dims),
                            std::vector<uint8_t>(data.begin(), data.end())});
  return absl::OkStatus();
}

std::vector<uint8_t> GgufWriter::Serialize() const {
  std::vector<uint8_t> out;
  ByteSink sink(&out);
  sink.PutBytes("GGUF", 4);
  sink.Put<uint32_t>(3);
  sink.Put<uint64_t>(tensors_.size());
  sink.Put<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    sink.PutString(key);
    sink.Put(static_cast<uint32_t>(value.type));
    sink.PutValue(value);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    sink.PutString(t.name);
    sink.Put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) sink.Put<uint64_t>(static_cast<uint64_t>(d));
    sink.Put(static_cast<uint32_t>(t.type));
    sink.Put<uint64_t>(offset);
    offset = (offset + t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  sink.PadTo(alignment_);
  for (const Tensor& t : tensors_) {
    sink.PutBytes(t.data.data(), t.data.size());
    sink.PadTo(alignment_);
  }
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  const std::vector<uint8_t> image = Serialize();
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("open '", path, "'"));
  if (std::fwrite(image.data(), 1, image.size(), file.get()) != image.size()) {
    return absl::ErrnoToStatus(errno, absl::StrCat("write '", path, "'"));
  }
  if (std::fclose(file.release()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("close '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace tpserve
