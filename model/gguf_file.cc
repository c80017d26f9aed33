#include "model/gguf_file.h"

#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/dequantize.h"

namespace tpserve {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF files are read in place as little-endian");

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxValueType = static_cast<uint32_t>(GgufValueType::kFloat64);
// Smallest encodings, used to reject counts that cannot fit in the bytes left before reserving.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, uint8 value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims = 0, type, offset
constexpr size_t kMaxQuotedChars = 96;

// The public API takes std::string_view; this Abseil build's string_view is its own type.
absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::string_view ValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "uint8";
    case GgufValueType::kInt8:
      return "int8";
    case GgufValueType::kUint16:
      return "uint16";
    case GgufValueType::kInt16:
      return "int16";
    case GgufValueType::kUint32:
      return "uint32";
    case GgufValueType::kInt32:
      return "int32";
    case GgufValueType::kFloat32:
      return "float32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "uint64";
    case GgufValueType::kInt64:
      return "int64";
    case GgufValueType::kFloat64:
      return "float64";
  }
  return "unknown";
}

// Bytes of the smallest encoding of one value of `type`.
uint64_t MinEncodedBytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString:  // u64 length
      return 8;
    case GgufValueType::kArray:  // u32 element type, u64 length
      return 12;
  }
  return 1;
}

// A name read from the file, quoted, escaped and bounded so that messages stay one short line.
std::string Quote(absl::string_view name) {
  std::string out = "'";
  out += absl::CHexEscape(name.substr(0, kMaxQuotedChars));
  if (name.size() > kMaxQuotedChars) out += "...";
  out += "'";
  return out;
}

// Names the field being read, e.g. "kv 'tokenizer.ggml.tokens' value[17]". Array elements
// chain to their array so the name is only built when an error is reported.
struct Field {
  absl::string_view base;
  const Field* parent = nullptr;
  uint64_t index = 0;

  std::string ToString() const {
    if (parent == nullptr) return std::string(base);
    return absl::StrCat(parent->ToString(), "[", index, "]");
  }
};

bool IsUnsigned(GgufValueType t) {
  return t == GgufValueType::kUint8 || t == GgufValueType::kUint16 || t == GgufValueType::kUint32 ||
         t == GgufValueType::kUint64;
}
bool IsSigned(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kInt64;
}
bool IsFloat(GgufValueType t) {
  return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64;
}

// The value of an integer-typed GgufValue as int64 when it fits.
std::optional<int64_t> AsInt64(const GgufValue& v) {
  if (IsUnsigned(v.type)) {
    const uint64_t u = std::get<uint64_t>(v.value);
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (IsSigned(v.type)) return std::get<int64_t>(v.value);
  return std::nullopt;
}

}  // namespace

// Reads a GGUF image front to back into a GgufFile. Every read is bounds-checked against the
// image; every count is checked against the bytes left before anything is reserved.
class GgufParser {
 public:
  GgufParser(absl::Span<const uint8_t> bytes, GgufFile* out) : bytes_(bytes), out_(out) {}

  absl::Status Run() {
    RETURN_IF_ERROR(ReadHeader());
    for (uint64_t i = 0; i < kv_count_; ++i) RETURN_IF_ERROR(ReadKeyValue(i));
    RETURN_IF_ERROR(ApplyAlignment());
    out_->tensors_.reserve(tensor_count_);
    out_->tensor_index_.reserve(tensor_count_);
    for (uint64_t i = 0; i < tensor_count_; ++i) RETURN_IF_ERROR(ReadTensorInfo(i));
    return PlaceDataSection();
  }

 private:
  uint64_t remaining() const { return bytes_.size() - pos_; }

  absl::Status Error(uint64_t offset, absl::string_view field, absl::string_view problem) const {
    return absl::InvalidArgumentError(absl::StrCat("gguf: ", out_->display_name_, ": ", field,
                                                   " at offset ", offset, ": ", problem));
  }

  absl::Status Truncated(const Field& field, uint64_t need) const {
    return Error(pos_, field.ToString(),
                 absl::StrCat("truncated: needs ", need, " bytes, ", remaining(), " left"));
  }

  template <typename T>
  absl::Status ReadPod(const Field& field, T* out) {
    if (remaining() < sizeof(T)) return Truncated(field, sizeof(T));
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadString(const Field& field, std::string* out) {
    uint64_t length = 0;
    RETURN_IF_ERROR(ReadPod(field, &length));
    if (length > remaining()) {
      return Error(
          pos_ - 8, field.ToString(),
          absl::StrCat("string length ", length, " exceeds the ", remaining(), " bytes left"));
    }
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return absl::OkStatus();
  }

  absl::Status ReadValueType(const Field& field, GgufValueType* out) {
    const uint64_t offset = pos_;
    uint32_t raw = 0;
    RETURN_IF_ERROR(ReadPod(field, &raw));
    if (raw > kMaxValueType) {
      return Error(offset, field.ToString(), absl::StrCat("unknown value type ", raw));
    }
    *out = static_cast<GgufValueType>(raw);
    return absl::OkStatus();
  }

  absl::Status ReadHeader() {
    if (remaining() < 4) return Truncated(Field{"magic"}, 4);
    if (std::memcmp(bytes_.data(), "GGUF", 4) != 0) {
      // The bytes found are not quoted: the file may be anything the caller named.
      return Error(0, "magic", "expected \"GGUF\": not a GGUF file");
    }
    pos_ = 4;
    RETURN_IF_ERROR(ReadPod(Field{"version"}, &out_->version_));
    if (out_->version_ != 2 && out_->version_ != 3) {
      const bool swapped = out_->version_ == 0x02000000 || out_->version_ == 0x03000000;
      return Error(4, "version",
                   absl::StrCat("unsupported version ", out_->version_,
                                swapped ? " (a big-endian file?)" : "", "; supported: 2, 3"));
    }
    RETURN_IF_ERROR(ReadPod(Field{"tensor_count"}, &tensor_count_));
    RETURN_IF_ERROR(ReadPod(Field{"kv_count"}, &kv_count_));
    if (tensor_count_ > remaining() / kMinTensorInfoBytes) {
      return Error(
          8, "tensor_count",
          absl::StrCat(tensor_count_, " tensors cannot fit in the ", remaining(), " bytes left"));
    }
    if (kv_count_ > remaining() / kMinKvBytes) {
      return Error(16, "kv_count",
                   absl::StrCat(kv_count_, " key-value pairs cannot fit in the ", remaining(),
                                " bytes left"));
    }
    out_->keys_.reserve(kv_count_);
    out_->metadata_.reserve(kv_count_);
    return absl::OkStatus();
  }

  absl::Status ReadKeyValue(uint64_t i) {
    const uint64_t key_offset = pos_;
    const std::string key_field = absl::StrCat("kv[", i, "] key");
    std::string key;
    RETURN_IF_ERROR(ReadString(Field{key_field}, &key));
    if (out_->metadata_.contains(key)) {
      return Error(key_offset, key_field, absl::StrCat("duplicate key ", Quote(key)));
    }
    const std::string type_field = absl::StrCat("kv ", Quote(key), " value type");
    const std::string value_field = absl::StrCat("kv ", Quote(key), " value");
    GgufValue value;
    RETURN_IF_ERROR(ReadValueType(Field{type_field}, &value.type));
    if (key == "general.alignment") alignment_offset_ = pos_;
    RETURN_IF_ERROR(ReadValue(Field{value_field}, 0, &value));
    out_->keys_.push_back(key);
    out_->metadata_.emplace(std::move(key), std::move(value));
    return absl::OkStatus();
  }

  // Reads a value whose type `out->type` is already known. `depth` counts enclosing arrays.
  absl::Status ReadValue(const Field& field, int depth, GgufValue* out) {
    switch (out->type) {
      case GgufValueType::kUint8:
        return ReadNumber<uint8_t, uint64_t>(field, out);
      case GgufValueType::kInt8:
        return ReadNumber<int8_t, int64_t>(field, out);
      case GgufValueType::kUint16:
        return ReadNumber<uint16_t, uint64_t>(field, out);
      case GgufValueType::kInt16:
        return ReadNumber<int16_t, int64_t>(field, out);
      case GgufValueType::kUint32:
        return ReadNumber<uint32_t, uint64_t>(field, out);
      case GgufValueType::kInt32:
        return ReadNumber<int32_t, int64_t>(field, out);
      case GgufValueType::kUint64:
        return ReadNumber<uint64_t, uint64_t>(field, out);
      case GgufValueType::kInt64:
        return ReadNumber<int64_t, int64_t>(field, out);
      case GgufValueType::kFloat32:
        return ReadNumber<float, double>(field, out);
      case GgufValueType::kFloat64:
        return ReadNumber<double, double>(field, out);
      case GgufValueType::kBool: {
        const uint64_t offset = pos_;
        uint8_t b = 0;
        RETURN_IF_ERROR(ReadPod(field, &b));
        if (b > 1) {
          return Error(offset, field.ToString(), absl::StrCat("bool byte ", b, " is not 0 or 1"));
        }
        out->value = b == 1;
        return absl::OkStatus();
      }
      case GgufValueType::kString: {
        std::string s;
        RETURN_IF_ERROR(ReadString(field, &s));
        out->value = std::move(s);
        return absl::OkStatus();
      }
      case GgufValueType::kArray:
        return ReadArray(field, depth, out);
    }
    return Error(pos_, field.ToString(), "unknown value type");  // ReadValueType rejects these
  }

  template <typename Stored, typename Widened>
  absl::Status ReadNumber(const Field& field, GgufValue* out) {
    Stored v{};
    RETURN_IF_ERROR(ReadPod(field, &v));
    out->value = static_cast<Widened>(v);
    return absl::OkStatus();
  }

  absl::Status ReadArray(const Field& field, int depth, GgufValue* out) {
    const uint64_t offset = pos_;
    if (depth >= kGgufMaxArrayDepth) {
      return Error(offset, field.ToString(),
                   absl::StrCat("arrays nested deeper than ", kGgufMaxArrayDepth, " levels"));
    }
    GgufArray array;
    uint32_t raw_type = 0;
    RETURN_IF_ERROR(ReadPod(field, &raw_type));
    if (raw_type > kMaxValueType) {
      return Error(offset, field.ToString(), absl::StrCat("unknown array element type ", raw_type));
    }
    array.element_type = static_cast<GgufValueType>(raw_type);
    uint64_t length = 0;
    RETURN_IF_ERROR(ReadPod(field, &length));
    const uint64_t min_bytes = MinEncodedBytes(array.element_type);
    if (length > remaining() / min_bytes) {
      return Error(pos_ - 8, field.ToString(),
                   absl::StrCat("array length ", length, " of ", ValueTypeName(array.element_type),
                                " cannot fit in the ", remaining(), " bytes left"));
    }
    if (length > values_budget_) {
      return Error(pos_ - 8, field.ToString(),
                   absl::StrCat("array length ", length, " exceeds the limit of ",
                                kGgufMaxMetadataValues, " metadata values per file"));
    }
    values_budget_ -= length;
    array.values.resize(length);
    for (uint64_t i = 0; i < length; ++i) {
      GgufValue& element = array.values[i];
      element.type = array.element_type;
      RETURN_IF_ERROR(ReadValue(Field{{}, &field, i}, depth + 1, &element));
    }
    out->value = std::move(array);
    return absl::OkStatus();
  }

  absl::Status ApplyAlignment() {
    out_->alignment_ = kDefaultAlignment;
    const GgufValue* v = out_->Find("general.alignment");
    if (v == nullptr) return absl::OkStatus();
    const std::optional<int64_t> a = AsInt64(*v);
    if (!a.has_value()) {
      return Error(alignment_offset_, "general.alignment",
                   absl::StrCat("has type ", ValueTypeName(v->type), ", want uint32"));
    }
    if (*a <= 0 || !std::has_single_bit(static_cast<uint64_t>(*a)) ||
        static_cast<uint64_t>(*a) > kGgufMaxAlignment) {
      return Error(alignment_offset_, "general.alignment",
                   absl::StrCat(*a, " is not a power of two in [1, ", kGgufMaxAlignment, "]"));
    }
    out_->alignment_ = static_cast<uint64_t>(*a);
    return absl::OkStatus();
  }

  absl::Status ReadTensorInfo(uint64_t i) {
    const uint64_t name_offset = pos_;
    const std::string name_field = absl::StrCat("tensor[", i, "] name");
    GgufTensorInfo t;
    RETURN_IF_ERROR(ReadString(Field{name_field}, &t.name));
    if (out_->tensor_index_.contains(t.name)) {
      return Error(name_offset, name_field, absl::StrCat("duplicate tensor name ", Quote(t.name)));
    }
    const std::string prefix = absl::StrCat("tensor ", Quote(t.name), " ");

    const std::string dims_field = prefix + "n_dims";
    const uint64_t n_dims_offset = pos_;
    uint32_t n_dims = 0;
    RETURN_IF_ERROR(ReadPod(Field{dims_field}, &n_dims));
    if (n_dims > kGgufMaxDims) {
      return Error(n_dims_offset, dims_field,
                   absl::StrCat(n_dims, " dimensions, at most ", kGgufMaxDims, " supported"));
    }
    t.dims.resize(n_dims);
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const std::string dim_field = absl::StrCat(prefix, "dims[", d, "]");
      const uint64_t dim_offset = pos_;
      uint64_t dim = 0;
      RETURN_IF_ERROR(ReadPod(Field{dim_field}, &dim));
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(dim_offset, dim_field, absl::StrCat(dim, " does not fit in int64"));
      }
      t.dims[d] = static_cast<int64_t>(dim);
      if (t.dims[d] != 0 && elements > std::numeric_limits<int64_t>::max() / t.dims[d]) {
        return Error(dim_offset, dim_field, "the product of the dims overflows int64");
      }
      elements *= t.dims[d];
    }
    t.num_elements = elements;

    const std::string type_field = prefix + "type";
    const uint64_t type_offset = pos_;
    uint32_t raw_type = 0;
    RETURN_IF_ERROR(ReadPod(Field{type_field}, &raw_type));
    const std::optional<GgmlTypeTraits> traits = GetGgmlTypeTraits(raw_type);
    if (!traits.has_value() || raw_type == static_cast<uint32_t>(GgmlType::kF8E4M3)) {
      return Error(type_offset, type_field,
                   absl::StrCat("ggml type ", raw_type, " (", GgmlTypeName(raw_type),
                                ") is not supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, "
                                "Q5_K and Q6_K are"));
    }
    t.type = static_cast<GgmlType>(raw_type);
    const int64_t row_elements = n_dims == 0 ? 1 : t.dims[0];
    if (row_elements % traits->block_elements != 0) {
      return Error(type_offset, type_field,
                   absl::StrCat("dims[0] = ", row_elements, " is not a multiple of the ",
                                View(traits->name), " block of ", traits->block_elements));
    }
    absl::StatusOr<uint64_t> num_bytes = GgmlBytesFor(t.type, t.num_elements);
    if (!num_bytes.ok()) return Error(type_offset, type_field, num_bytes.status().message());
    t.num_bytes = *num_bytes;

    const std::string offset_field = prefix + "offset";
    const uint64_t offset_offset = pos_;
    RETURN_IF_ERROR(ReadPod(Field{offset_field}, &t.offset));
    if (t.offset % out_->alignment_ != 0) {
      return Error(
          offset_offset, offset_field,
          absl::StrCat(t.offset, " is not a multiple of the alignment ", out_->alignment_));
    }
    out_->tensor_index_.emplace(t.name, out_->tensors_.size());
    out_->tensors_.push_back(std::move(t));
    return absl::OkStatus();
  }

  // The data section starts at the first aligned offset after the tensor table.
  absl::Status PlaceDataSection() {
    const uint64_t a = out_->alignment_;
    const uint64_t data_offset = (pos_ + a - 1) / a * a;
    if (data_offset > bytes_.size()) {
      if (out_->tensors_.empty()) {  // a metadata-only file may omit the final padding
        out_->data_offset_ = bytes_.size();
        return absl::OkStatus();
      }
      return Error(pos_, "data section",
                   absl::StrCat("starts at offset ", data_offset, ", past the end of the file (",
                                bytes_.size(), " bytes)"));
    }
    out_->data_offset_ = data_offset;
    const uint64_t data_size = bytes_.size() - data_offset;
    for (const GgufTensorInfo& t : out_->tensors_) {
      if (t.offset > data_size || t.num_bytes > data_size - t.offset) {
        return Error(data_offset + t.offset, absl::StrCat("tensor ", Quote(t.name), " data"),
                     absl::StrCat(t.num_bytes, " bytes end past the end of the file (",
                                  bytes_.size(), " bytes)"));
      }
    }
    return absl::OkStatus();
  }

  absl::Span<const uint8_t> bytes_;
  GgufFile* out_;
  uint64_t pos_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
  uint64_t alignment_offset_ = 0;  // file offset of general.alignment's value
  uint64_t values_budget_ = kGgufMaxMetadataValues;
};

int64_t GgufTensorInfo::rows() const {
  int64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
  return rows;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapping, MappedFile::Open(path));
  const absl::Span<const uint8_t> bytes = mapping->bytes();
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, Parse(bytes, path));
  file->mappings_.push_back(std::move(mapping));
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(absl::Span<const uint8_t> bytes,
                                                          std::string display_name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->bytes_ = bytes;
  file->display_name_ = std::move(display_name);
  RETURN_IF_ERROR(GgufParser(bytes, file.get()).Run());
  file->file_size_ = bytes.size();
  file->header_ = bytes.subspan(0, file->data_offset_);
  file->sections_ = {bytes.subspan(file->data_offset_)};
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Assemble(GgufParts parts) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->display_name_ = std::move(parts.display_name);
  file->version_ = 3;
  for (auto& [key, value] : parts.metadata) {
    if (file->metadata_.contains(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: ", file->display_name_, ": key ", Quote(key), " set twice"));
    }
    file->keys_.push_back(key);
    file->metadata_.emplace(key, std::move(value));
  }
  file->mappings_ = std::move(parts.mappings);
  for (const auto& mapping : file->mappings_) file->file_size_ += mapping->bytes().size();
  file->sections_ = std::move(parts.sections);
  file->owned_ = std::move(parts.owned);
  for (const std::vector<uint8_t>& buffer : file->owned_) file->sections_.emplace_back(buffer);
  for (GgufTensorInfo& t : parts.tensors) {
    const auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: ", file->display_name_, ": tensor ", Quote(t.name), ": ", what));
    };
    if (file->tensor_index_.contains(t.name)) return error("named twice");
    if (t.section >= file->sections_.size()) return error("no such data section");
    if (t.dims.empty() || t.dims.size() > kGgufMaxDims) return error("needs 1 to 4 dims");
    t.num_elements = 1;
    for (const int64_t d : t.dims) {
      if (d <= 0 || t.num_elements > std::numeric_limits<int64_t>::max() / d) {
        return error("dims are not positive or overflow");
      }
      t.num_elements *= d;
    }
    const absl::StatusOr<uint64_t> bytes = GgmlBytesFor(t.type, t.num_elements);
    if (!bytes.ok()) return error(bytes.status().message());
    const int64_t rows = t.num_elements / t.dims[0];
    const size_t scales = t.row_scales.size();
    if ((t.type == GgmlType::kF8E4M3) != (scales > 0) ||
        (scales > 1 && static_cast<int64_t>(scales) != rows)) {
      return error(absl::StrCat(scales, " row scales for a ", rows, "-row ",
                                GgmlTypeName(static_cast<uint32_t>(t.type)), " tensor"));
    }
    const uint64_t section_bytes = file->sections_[t.section].size();
    if (*bytes != t.num_bytes || t.offset > section_bytes ||
        t.num_bytes > section_bytes - t.offset) {
      return error(absl::StrCat(t.num_bytes, " bytes at offset ", t.offset, " are not the ", *bytes,
                                " its dims occupy inside its file (", section_bytes,
                                " bytes of data)"));
    }
    file->tensor_index_.emplace(t.name, file->tensors_.size());
    file->tensors_.push_back(std::move(t));
  }
  file->identity_ = std::move(parts.identity);
  file->header_ = absl::Span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(file->identity_.data()), file->identity_.size());
  return file;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(View(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

absl::Status NotFound(std::string_view key) {
  return absl::NotFoundError(absl::StrCat("gguf: key ", Quote(View(key)), " not found"));
}

absl::Status WrongType(std::string_view key, const GgufValue& v, absl::string_view want) {
  std::string have(ValueTypeName(v.type));
  if (v.type == GgufValueType::kArray) {
    absl::StrAppend(&have, " of ", ValueTypeName(std::get<GgufArray>(v.value).element_type));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("gguf: key ", Quote(View(key)), " has type ", have, ", want ", want));
}

// The array at `key` when its elements satisfy `accept`.
absl::StatusOr<const GgufArray*> FindArray(const GgufFile& file, std::string_view key,
                                           bool (*accept)(GgufValueType), absl::string_view want) {
  const GgufValue* v = file.Find(key);
  if (v == nullptr) return NotFound(key);
  if (v->type != GgufValueType::kArray) return WrongType(key, *v, want);
  const GgufArray& array = std::get<GgufArray>(v->value);
  if (!accept(array.element_type)) return WrongType(key, *v, want);
  return &array;
}

}  // namespace

absl::StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (IsUnsigned(v->type)) return std::get<uint64_t>(v->value);
  if (IsSigned(v->type)) {
    const int64_t i = std::get<int64_t>(v->value);
    if (i < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: key ", Quote(View(key)), " is negative (", i, "), want unsigned"));
    }
    return static_cast<uint64_t>(i);
  }
  return WrongType(key, *v, "an unsigned integer");
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (!IsFloat(v->type)) return WrongType(key, *v, "float32 or float64");
  return std::get<double>(v->value);
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (v->type != GgufValueType::kBool) return WrongType(key, *v, "bool");
  return std::get<bool>(v->value);
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (v->type != GgufValueType::kString) return WrongType(key, *v, "string");
  return std::get<std::string>(v->value);
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufArray* array,
                   FindArray(
                       *this, key, [](GgufValueType t) { return t == GgufValueType::kString; },
                       "array of string"));
  std::vector<std::string> out;
  out.reserve(array->values.size());
  for (const GgufValue& v : array->values) out.push_back(std::get<std::string>(v.value));
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufArray* array,
                   FindArray(
                       *this, key, [](GgufValueType t) { return IsUnsigned(t) || IsSigned(t); },
                       "array of integers"));
  std::vector<int64_t> out;
  out.reserve(array->values.size());
  for (size_t i = 0; i < array->values.size(); ++i) {
    const std::optional<int64_t> value = AsInt64(array->values[i]);
    if (!value.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: key ", Quote(View(key)), " element ", i, " does not fit in int64"));
    }
    out.push_back(*value);
  }
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufArray* array,
                   FindArray(*this, key, IsFloat, "array of float32 or float64"));
  std::vector<double> out;
  out.reserve(array->values.size());
  for (const GgufValue& v : array->values) out.push_back(std::get<double>(v.value));
  return out;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(View(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::Span<const uint8_t> GgufFile::TensorData(const GgufTensorInfo& tensor) const {
  return sections_[tensor.section].subspan(tensor.offset, tensor.num_bytes);
}

}  // namespace tpserve
