// ParseSafetensors against truncated, corrupt and hostile images: each gives one INVALID_ARGUMENT
// line naming the file (and the tensor where there is one), without reading out of bounds. Also
// GgufFile::Assemble's own checks, which stand between a folder's tensors and the shard loader.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf_file.h"
#include "model/safetensors_file.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

// An image with `header` as its JSON and `data_bytes` zero bytes of data.
std::vector<uint8_t> Image(const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);
  bytes += header;
  bytes.append(data_bytes, '\0');
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

const std::string kValid =
    R"({"__metadata__": {"format": "pt"},
        "a.weight": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
        "b.bias": {"dtype": "F32", "shape": [3], "data_offsets": [12, 24]}})";

std::string ErrorOf(const std::vector<uint8_t>& image) {
  const absl::StatusOr<SafetensorsHeader> header = ParseSafetensors(image, "w.safetensors");
  EXPECT_FALSE(header.ok());
  if (header.ok()) return "";
  EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(header.status().message(), HasSubstr("w.safetensors: "));
  return std::string(header.status().message());
}

TEST(SafetensorsRejects, ValidImageParses) {
  const std::vector<uint8_t> image = Image(kValid, 24);
  const absl::StatusOr<SafetensorsHeader> header = ParseSafetensors(image, "w.safetensors");
  ASSERT_TRUE(header.ok()) << header.status();
  ASSERT_EQ(header->tensors.size(), 2u);
  const SafetensorsTensor& a = header->tensors[0];
  EXPECT_EQ(a.name, "a.weight");
  EXPECT_EQ(a.dtype, "BF16");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(header->tensors[1].begin, 12u);
  EXPECT_EQ(header->data.size(), 24u);
  EXPECT_EQ(header->json.size(), kValid.size());
}

TEST(SafetensorsRejects, EveryTruncationFails) {
  const std::vector<uint8_t> image = Image(kValid, 24);
  for (size_t size = 0; size < image.size(); ++size) {
    const std::vector<uint8_t> cut(image.begin(), image.begin() + size);
    EXPECT_FALSE(ParseSafetensors(cut, "w.safetensors").ok()) << size;
  }
}

TEST(SafetensorsRejects, EachDefectIsNamed) {
  const struct {
    std::string header;
    const char* want;
  } cases[] = {
      {R"([1, 2])", "header is not a JSON object"},
      {R"({"a": )", "header is not a JSON object"},
      {R"({"a": 5})", "tensor 'a': entry is not an object"},
      {R"({"a": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}})", "unknown dtype 'Q4'"},
      {R"({"a": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}})", "shape is not"},
      {R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "not a size"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", "data_offsets is not"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", "lie outside"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 400]}})", "truncated"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})",
       "4 bytes of data, but its shape and F32 make 8"},
      {R"({"a": {"dtype": "F64", "shape": [4294967296, 4294967296, 4294967296],
                 "data_offsets": [0, 8]}})",
       "shape overflows"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(ErrorOf(Image(c.header, 24)), HasSubstr(c.want)) << c.header;
  }
  std::vector<uint8_t> huge = Image("{}", 0);
  const uint64_t length = uint64_t{1} << 62;
  std::memcpy(huge.data(), &length, 8);
  EXPECT_THAT(ErrorOf(huge), HasSubstr("exceeds the file"));
}

TEST(GgufAssemble, RefusesTensorsOutsideTheirSection) {
  const std::vector<uint8_t> data(64);
  const auto assemble = [&](GgufTensorInfo tensor) {
    GgufParts parts;
    parts.display_name = "folder";
    parts.sections = {absl::MakeConstSpan(data)};
    tensor.name = "t";
    parts.tensors = {tensor};
    return GgufFile::Assemble(std::move(parts));
  };
  GgufTensorInfo fits;
  fits.dims = {16};
  fits.type = GgmlType::kF32;
  fits.offset = 0;
  fits.num_bytes = 64;
  const absl::StatusOr<std::unique_ptr<GgufFile>> file = assemble(fits);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->TensorData(*(*file)->FindTensor("t")).data(), data.data());
  GgufTensorInfo past = fits;
  past.offset = 4;
  EXPECT_THAT(assemble(past).status().message(), HasSubstr("tensor 't': 64 bytes at offset 4"));
  GgufTensorInfo short_data = fits;
  short_data.num_bytes = 60;
  EXPECT_THAT(assemble(short_data).status().message(), HasSubstr("are not the 64"));
  GgufTensorInfo no_section = fits;
  no_section.section = 1;
  EXPECT_THAT(assemble(no_section).status().message(), HasSubstr("no such data section"));
}

}  // namespace
}  // namespace tpserve
