// GgufFile against truncated, corrupt and hostile images: every one must give a one-line
// INVALID_ARGUMENT naming the field and its offset, without crashing, reading out of bounds or
// allocating by an unchecked count. Also checks that a written file reads back unchanged and
// that the bundled model opens. Run under -DTPSERVE_ASAN=ON as well.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf_file.h"
#include "model/gguf_writer.h"

namespace tpserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kHuge = uint64_t{1} << 60;
constexpr uint32_t kTypeUint8 = 0, kTypeUint32 = 4, kTypeBool = 7, kTypeString = 8, kTypeArray = 9;

// Appends raw little-endian GGUF fields, for images the writer refuses to produce.
class RawImage {
 public:
  RawImage& U8(uint8_t v) { return Put(v); }
  RawImage& U32(uint32_t v) { return Put(v); }
  RawImage& U64(uint64_t v) { return Put(v); }
  RawImage& Str(std::string_view s) {
    U64(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  RawImage& Header(uint64_t tensor_count, uint64_t kv_count, uint32_t version = 3) {
    bytes.insert(bytes.end(), {'G', 'G', 'U', 'F'});
    return U32(version).U64(tensor_count).U64(kv_count);
  }
  RawImage& KvU32(std::string_view key, uint32_t v) { return Str(key).U32(kTypeUint32).U32(v); }
  // A tensor table entry of one F32 row of 32 elements.
  RawImage& F32Row(std::string_view name, uint64_t offset) {
    return Str(name).U32(1).U64(32).U32(0).U64(offset);
  }
  RawImage& PadTo(size_t alignment) {
    bytes.resize((bytes.size() + alignment - 1) / alignment * alignment);
    return *this;
  }
  RawImage& Zeros(size_t n) {
    bytes.resize(bytes.size() + n);
    return *this;
  }

  std::vector<uint8_t> bytes;

 private:
  template <typename T>
  RawImage& Put(T v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));
    return *this;
  }
};

// A valid image with strings, an array and two tensors; the last tensor's data ends the file.
std::vector<uint8_t> ValidImage() {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint32("llama.block_count", 2);
  w.SetStringArray("tokenizer.ggml.tokens", {"alpha", "bb", "c"});
  w.SetFloat32("llama.rope.freq_base", 10000.0f);
  std::vector<uint8_t> q8(68, 0x11);
  EXPECT_TRUE(w.AddTensor("blk.0.q8", GgmlType::kQ8_0, {32, 2}, q8).ok());
  std::vector<uint8_t> f32(128, 0x22);
  EXPECT_TRUE(w.AddTensor("blk.0.norm", GgmlType::kF32, {32}, f32).ok());
  return w.Serialize();
}

// Offset of the first occurrence of `needle` in `image` (the bytes of a key or tensor name).
size_t OffsetOf(const std::vector<uint8_t>& image, std::string_view needle) {
  const auto it = std::search(image.begin(), image.end(), needle.begin(), needle.end());
  EXPECT_NE(it, image.end()) << needle;
  return static_cast<size_t>(it - image.begin());
}

template <typename T>
void Patch(std::vector<uint8_t>* image, size_t offset, T value) {
  ASSERT_LE(offset + sizeof(T), image->size());
  std::memcpy(image->data() + offset, &value, sizeof(T));
}

// Parses `image`, expecting a one-line INVALID_ARGUMENT; returns its message.
std::string ParseError(const std::vector<uint8_t>& image) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(image, "bad.gguf");
  if (file.ok()) {
    ADD_FAILURE() << "parsed a bad image of " << image.size() << " bytes";
    return "";
  }
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  const std::string message(file.status().message());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_THAT(message, AllOf(HasSubstr("gguf: bad.gguf: "), HasSubstr(" at offset ")));
  return message;
}

std::vector<uint8_t> Prefix(const std::vector<uint8_t>& image, size_t length) {
  return std::vector<uint8_t>(image.begin(), image.begin() + length);
}

TEST(GgufRejects, ValidImageParses) {
  const std::vector<uint8_t> image = ValidImage();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(image, "ok.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 2u);
}

TEST(GgufRejects, EveryTruncationFails) {
  const std::vector<uint8_t> image = ValidImage();
  for (size_t length = 0; length < image.size(); ++length) {
    SCOPED_TRACE(length);
    ParseError(Prefix(image, length));
  }
}

TEST(GgufRejects, TruncationNamesTheSection) {
  const std::vector<uint8_t> image = ValidImage();
  const size_t tokens_key = OffsetOf(image, "tokenizer.ggml.tokens");
  const size_t freq_key = OffsetOf(image, "llama.rope.freq_base");
  const size_t q8 = OffsetOf(image, "blk.0.q8");

  EXPECT_THAT(ParseError(Prefix(image, 0)), HasSubstr("magic at offset 0: truncated"));
  EXPECT_THAT(ParseError(Prefix(image, 6)), HasSubstr("version at offset 4: truncated"));
  EXPECT_THAT(ParseError(Prefix(image, 12)), HasSubstr("tensor_count at offset 8: truncated"));
  EXPECT_THAT(ParseError(Prefix(image, 20)), HasSubstr("kv_count at offset 16: truncated"));
  EXPECT_THAT(ParseError(Prefix(image, tokens_key + 5)),
              HasSubstr("kv[2] key at offset " + std::to_string(tokens_key - 8) +
                        ": string length 21 exceeds the 5 bytes left"));
  EXPECT_THAT(ParseError(Prefix(image, freq_key + 20 + 4 + 2)),
              HasSubstr("kv 'llama.rope.freq_base' value at offset"));
  // Inside the last element of the token array: its elements start at key + 37 and take
  // 8 + 5, 8 + 2 and 8 + 1 bytes.
  EXPECT_THAT(ParseError(Prefix(image, tokens_key + 37 + 13 + 10 + 8)),
              HasSubstr("kv 'tokenizer.ggml.tokens' value[2] at offset"));
  EXPECT_THAT(ParseError(Prefix(image, q8 + 8 + 4 + 8 + 3)),
              HasSubstr("tensor 'blk.0.q8' dims[1] at offset"));
  EXPECT_THAT(ParseError(Prefix(image, image.size() - 1)),
              HasSubstr("tensor 'blk.0.norm' data at offset"));
}

TEST(GgufRejects, BadMagicAndVersion) {
  std::vector<uint8_t> image = ValidImage();
  image[0] = 'X';
  EXPECT_THAT(ParseError(image), HasSubstr("magic at offset 0: expected \"GGUF\""));

  image = ValidImage();
  Patch<uint32_t>(&image, 4, 4);
  EXPECT_THAT(ParseError(image), HasSubstr("version at offset 4: unsupported version 4"));
  Patch<uint32_t>(&image, 4, 1);
  EXPECT_THAT(ParseError(image), HasSubstr("unsupported version 1"));
  Patch<uint32_t>(&image, 4, 0x03000000);
  EXPECT_THAT(ParseError(image), HasSubstr("big-endian"));
  Patch<uint32_t>(&image, 4, 2);
  EXPECT_TRUE(GgufFile::Parse(image, "v2.gguf").ok());
}

TEST(GgufRejects, HugeCountsAreRejectedBeforeAllocating) {
  const std::vector<uint8_t> valid = ValidImage();
  const size_t tokens_key = OffsetOf(valid, "tokenizer.ggml.tokens");
  const size_t q8 = OffsetOf(valid, "blk.0.q8");
  struct Case {
    size_t offset;
    std::string_view want;
  };
  for (const Case& c : std::vector<Case>{
           {8, "tensor_count at offset 8: 1152921504606846976 tensors cannot fit"},
           {16, "kv_count at offset 16: 1152921504606846976 key-value pairs cannot fit"},
           {24, "kv[0] key at offset 24: string length 1152921504606846976 exceeds"},
           {24 + 8 + 20 + 4, "kv 'general.architecture' value at offset 56: string length"},
           {tokens_key + 21 + 4 + 4, "kv 'tokenizer.ggml.tokens' value at offset"},
           {q8 - 8, "tensor[0] name at offset"},
       }) {
    std::vector<uint8_t> image = valid;
    Patch<uint64_t>(&image, c.offset, kHuge);
    EXPECT_THAT(ParseError(image), HasSubstr(c.want)) << c.offset;
  }
  std::vector<uint8_t> image = valid;
  Patch<uint64_t>(&image, tokens_key + 21 + 4 + 4, kHuge);
  EXPECT_THAT(ParseError(image), HasSubstr("array length 1152921504606846976 of string"));
}

TEST(GgufRejects, UnknownValueTypes) {
  std::vector<uint8_t> image = ValidImage();
  Patch<uint32_t>(&image, 24 + 8 + 20, 13);
  EXPECT_THAT(ParseError(image), HasSubstr("kv 'general.architecture' value type at offset 52: "
                                           "unknown value type 13"));

  image = ValidImage();
  const size_t tokens_key = OffsetOf(image, "tokenizer.ggml.tokens");
  Patch<uint32_t>(&image, tokens_key + 21 + 4, 0xFFFFFFFF);
  EXPECT_THAT(ParseError(image), HasSubstr("unknown array element type 4294967295"));

  // A value type that is valid but does not match the bytes: a uint64 where a string was.
  image = ValidImage();
  Patch<uint32_t>(&image, tokens_key + 21, 10);  // the array becomes one uint64
  EXPECT_THAT(ParseError(image), HasSubstr("at offset"));
}

TEST(GgufRejects, BadTensorInfo) {
  const std::vector<uint8_t> valid = ValidImage();
  const size_t q8 = OffsetOf(valid, "blk.0.q8");      // name bytes; n_dims follows at +8
  const size_t norm = OffsetOf(valid, "blk.0.norm");  // n_dims at +10

  std::vector<uint8_t> image = valid;
  Patch<uint32_t>(&image, q8 + 8 + 4 + 16, 99);
  EXPECT_THAT(ParseError(image),
              HasSubstr("tensor 'blk.0.q8' type at offset " + std::to_string(q8 + 28) +
                        ": ggml type 99 (unknown) is not supported"));
  Patch<uint32_t>(&image, q8 + 8 + 4 + 16, 6);  // Q5_0: a ggml type this build does not decode
  EXPECT_THAT(ParseError(image), HasSubstr("ggml type 6 (Q5_0) is not supported"));
  Patch<uint32_t>(&image, q8 + 8 + 4 + 16, 11);  // Q3_K
  EXPECT_THAT(ParseError(image), HasSubstr("ggml type 11 (Q3_K) is not supported"));
  // The FP8 type of Hugging Face views has no scales in a GGUF file: refused there.
  Patch<uint32_t>(&image, q8 + 8 + 4 + 16, static_cast<uint32_t>(GgmlType::kF8E4M3));
  EXPECT_THAT(ParseError(image), HasSubstr("ggml type 1000 (F8_E4M3) is not supported"));

  image = valid;
  Patch<uint32_t>(&image, q8 + 8, 5);
  EXPECT_THAT(ParseError(image), HasSubstr("tensor 'blk.0.q8' n_dims at offset"));
  Patch<uint32_t>(&image, q8 + 8, 0xFFFFFFFF);
  EXPECT_THAT(ParseError(image), HasSubstr("4294967295 dimensions, at most 4"));

  image = valid;
  Patch<uint64_t>(&image, q8 + 12, uint64_t{1} << 62);
  Patch<uint64_t>(&image, q8 + 20, 4);
  EXPECT_THAT(ParseError(image),
              AllOf(HasSubstr("tensor 'blk.0.q8' dims[1]"), HasSubstr("overflows int64")));
  Patch<uint64_t>(&image, q8 + 12, ~uint64_t{0});
  EXPECT_THAT(ParseError(image), HasSubstr("dims[0] at offset"));

  image = valid;
  Patch<uint64_t>(&image, q8 + 12, 31);
  EXPECT_THAT(ParseError(image), HasSubstr("dims[0] = 31 is not a multiple of the Q8_0 block"));

  image = valid;
  Patch<uint64_t>(&image, norm + 26, 96 + 1);
  EXPECT_THAT(ParseError(image),
              HasSubstr("tensor 'blk.0.norm' offset at offset " + std::to_string(norm + 26) +
                        ": 97 is not a multiple of the alignment 32"));

  image = valid;
  Patch<uint64_t>(&image, norm + 26, uint64_t{1} << 40);
  EXPECT_THAT(ParseError(image), AllOf(HasSubstr("tensor 'blk.0.norm' data at offset"),
                                       HasSubstr("past the end of the file")));
  Patch<uint64_t>(&image, norm + 26, ~uint64_t{0} - 31);  // offset + data_offset wraps
  EXPECT_THAT(ParseError(image), HasSubstr("tensor 'blk.0.norm' data"));
}

TEST(GgufRejects, DuplicateKeysAndTensorNames) {
  RawImage keys;
  keys.Header(0, 2).KvU32("a.b", 1).KvU32("a.b", 2);
  EXPECT_THAT(ParseError(keys.bytes), HasSubstr("kv[1] key at offset 43: duplicate key 'a.b'"));

  RawImage hostile;  // a key with a newline stays on one line in the message
  hostile.Header(0, 2).KvU32("x\ny", 1).KvU32("x\ny", 2);
  EXPECT_THAT(ParseError(hostile.bytes), HasSubstr("duplicate key 'x\\ny'"));

  RawImage tensors;
  tensors.Header(2, 0).F32Row("t", 0).F32Row("t", 128).PadTo(32).Zeros(256);
  EXPECT_THAT(ParseError(tensors.bytes), HasSubstr("tensor[1] name at offset"));
  EXPECT_THAT(ParseError(tensors.bytes), HasSubstr("duplicate tensor name 't'"));
}

TEST(GgufRejects, NestingBoolsAndAlignment) {
  // Arrays nested kGgufMaxArrayDepth deep parse; one more level is rejected.
  const auto nested = [](int depth) {
    RawImage r;
    r.Header(0, 1).Str("deep").U32(kTypeArray);
    for (int i = 1; i < depth; ++i) r.U32(kTypeArray).U64(1);
    r.U32(kTypeUint8).U64(1).U8(7);
    return r.bytes;
  };
  absl::StatusOr<std::unique_ptr<GgufFile>> ok = GgufFile::Parse(nested(kGgufMaxArrayDepth), "n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(ParseError(nested(kGgufMaxArrayDepth + 1)),
              HasSubstr("kv 'deep' value[0][0][0] at offset"));
  EXPECT_THAT(ParseError(nested(100)), HasSubstr("arrays nested deeper than 3 levels"));

  RawImage bad_bool;
  bad_bool.Header(0, 1).Str("flag").U32(kTypeBool).U8(2);
  EXPECT_THAT(ParseError(bad_bool.bytes), HasSubstr("kv 'flag' value at offset 40: bool byte 2"));

  RawImage align48;
  align48.Header(0, 1).KvU32("general.alignment", 48);
  EXPECT_THAT(ParseError(align48.bytes),
              HasSubstr("general.alignment at offset 53: 48 is not a power of two"));
  RawImage align_string;
  align_string.Header(0, 1).Str("general.alignment").U32(kTypeString).Str("32");
  EXPECT_THAT(ParseError(align_string.bytes), HasSubstr("general.alignment at offset"));
}

TEST(GgufRejects, MetadataValueLimit) {
  RawImage r;
  const uint64_t n = kGgufMaxMetadataValues + 1;
  r.Header(0, 1).Str("big").U32(kTypeArray).U32(kTypeUint8).U64(n).Zeros(n);
  EXPECT_THAT(ParseError(r.bytes), HasSubstr("exceeds the limit of 4194304 metadata values"));
}

TEST(GgufRejects, DataSectionPastEnd) {
  RawImage r;
  r.Header(1, 0).F32Row("t", 0);  // the table ends unaligned and the data is missing
  EXPECT_THAT(ParseError(r.bytes), HasSubstr("data section at offset"));
  RawImage metadata_only;  // no tensors: the final padding may be omitted
  metadata_only.Header(0, 1).KvU32("k", 1);
  EXPECT_TRUE(GgufFile::Parse(metadata_only.bytes, "m").ok());
}

// Random byte corruption never crashes and never yields a multi-line message.
TEST(GgufRejects, RandomMutationsNeverCrash) {
  const std::vector<uint8_t> valid = ValidImage();
  std::mt19937 rng(20251130);
  std::uniform_int_distribution<size_t> position(0, valid.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  int rejected = 0;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::vector<uint8_t> image = valid;
    const int flips = 1 + iteration % 4;
    for (int i = 0; i < flips; ++i) image[position(rng)] = static_cast<uint8_t>(byte(rng));
    if (iteration % 3 == 0) image.resize(position(rng));
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(image, "fuzz");
    if (file.ok()) {
      for (const GgufTensorInfo& t : (*file)->tensors()) {
        ASSERT_LE((*file)->TensorData(t).size(), image.size());
      }
      continue;
    }
    ++rejected;
    ASSERT_EQ(file.status().message().find('\n'), std::string::npos) << file.status();
  }
  EXPECT_GT(rejected, 1000);
}

TEST(GgufRoundTrip, EveryValueTypeAndTensorReadsBack) {
  GgufWriter w;
  ASSERT_TRUE(w.SetAlignment(64).ok());
  w.SetValue("t.u8", GgufValue{GgufValueType::kUint8, uint64_t{200}});
  w.SetValue("t.i8", GgufValue{GgufValueType::kInt8, int64_t{-100}});
  w.SetValue("t.u16", GgufValue{GgufValueType::kUint16, uint64_t{60000}});
  w.SetValue("t.i16", GgufValue{GgufValueType::kInt16, int64_t{-30000}});
  w.SetUint32("t.u32", 4000000000u);
  w.SetInt32("t.i32", -2000000000);
  w.SetUint64("t.u64", uint64_t{1} << 63);
  w.SetValue("t.i64", GgufValue{GgufValueType::kInt64, int64_t{-(int64_t{1} << 62)}});
  w.SetFloat32("t.f32", 0.1f);
  w.SetValue("t.f64", GgufValue{GgufValueType::kFloat64, 0.1});
  w.SetBool("t.bool", true);
  w.SetString("t.str", std::string("nul\0inside", 10));
  w.SetStringArray("t.strs", {"", "x", "yz"});
  w.SetInt32Array("t.ints", {-1, 0, 7});
  w.SetFloat32Array("t.floats", {0.5f, -2.0f});
  GgufArray inner{GgufValueType::kUint8, {GgufValue{GgufValueType::kUint8, uint64_t{9}}}};
  GgufArray outer{GgufValueType::kArray, {GgufValue{GgufValueType::kArray, inner}}};
  w.SetValue("t.nested", GgufValue{GgufValueType::kArray, outer});
  w.SetUint32("t.u32", 7);  // replaced in place

  std::vector<uint8_t> f32(4 * 64), f16(2 * 64), q4(18 * 4), q8(34 * 2);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < f16.size(); ++i) f16[i] = static_cast<uint8_t>(i * 3);
  for (size_t i = 0; i < q4.size(); ++i) q4[i] = static_cast<uint8_t>(i * 5);
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<uint8_t>(i * 11);
  ASSERT_TRUE(w.AddTensor("a", GgmlType::kF32, {64}, f32).ok());
  ASSERT_TRUE(w.AddTensor("b", GgmlType::kF16, {32, 2}, f16).ok());
  ASSERT_TRUE(w.AddTensor("c", GgmlType::kQ4_0, {64, 1, 2}, q4).ok());
  ASSERT_TRUE(w.AddTensor("d", GgmlType::kQ8_0, {32, 1, 1, 2}, q8).ok());
  EXPECT_FALSE(w.AddTensor("a", GgmlType::kF32, {64}, f32).ok());
  EXPECT_FALSE(w.AddTensor("e", GgmlType::kQ8_0, {31}, q8).ok());
  EXPECT_FALSE(w.AddTensor("e", GgmlType::kF32, {63}, f32).ok());
  EXPECT_FALSE(w.AddTensor("e", GgmlType::kF32, {1, 1, 1, 1, 64}, f32).ok());

  const std::string path = ::testing::TempDir() + "/round_trip.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const GgufFile& file = **opened;
  std::filesystem::remove(path);

  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 64u);
  EXPECT_EQ(file.header_bytes().size() % 64, 0u);
  EXPECT_EQ(file.keys().front(), "general.alignment");
  EXPECT_EQ(file.keys()[5], "t.u32");
  EXPECT_EQ(*file.GetUint("t.u8"), 200u);
  EXPECT_EQ(*file.GetUint("t.u16"), 60000u);
  EXPECT_EQ(*file.GetUint("t.u32"), 7u);
  EXPECT_EQ(*file.GetUint("t.u64"), uint64_t{1} << 63);
  EXPECT_EQ(std::get<int64_t>(file.Find("t.i8")->value), -100);
  EXPECT_EQ(std::get<int64_t>(file.Find("t.i16")->value), -30000);
  EXPECT_EQ(std::get<int64_t>(file.Find("t.i32")->value), -2000000000);
  EXPECT_EQ(std::get<int64_t>(file.Find("t.i64")->value), -(int64_t{1} << 62));
  EXPECT_EQ(file.Find("t.i8")->type, GgufValueType::kInt8);
  EXPECT_EQ(*file.GetFloat("t.f32"), static_cast<double>(0.1f));
  EXPECT_EQ(*file.GetFloat("t.f64"), 0.1);
  EXPECT_TRUE(*file.GetBool("t.bool"));
  EXPECT_EQ(*file.GetString("t.str"), std::string("nul\0inside", 10));
  EXPECT_EQ(*file.GetStringArray("t.strs"), (std::vector<std::string>{"", "x", "yz"}));
  EXPECT_EQ(*file.GetIntArray("t.ints"), (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_EQ(*file.GetFloatArray("t.floats"), (std::vector<double>{0.5, -2.0}));
  const GgufArray& got_outer = std::get<GgufArray>(file.Find("t.nested")->value);
  ASSERT_EQ(got_outer.element_type, GgufValueType::kArray);
  const GgufArray& got_inner = std::get<GgufArray>(got_outer.values.at(0).value);
  EXPECT_EQ(std::get<uint64_t>(got_inner.values.at(0).value), 9u);

  // Typed getters: NOT_FOUND when absent, INVALID_ARGUMENT naming the key otherwise.
  EXPECT_EQ(file.GetUint("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.GetUint("t.i8").status().message()),
              AllOf(HasSubstr("'t.i8'"), HasSubstr("negative")));
  EXPECT_THAT(std::string(file.GetString("t.u8").status().message()),
              HasSubstr("key 't.u8' has type uint8, want string"));
  EXPECT_THAT(std::string(file.GetStringArray("t.ints").status().message()),
              HasSubstr("has type array of int32"));
  EXPECT_FALSE(file.GetFloat("t.u32").ok());

  const std::vector<std::pair<std::string, const std::vector<uint8_t>*>> want = {
      {"a", &f32}, {"b", &f16}, {"c", &q4}, {"d", &q8}};
  ASSERT_EQ(file.tensors().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const GgufTensorInfo* t = file.FindTensor(want[i].first);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t, &file.tensors()[i]);
    EXPECT_EQ(t->offset % 64, 0u);
    const absl::Span<const uint8_t> data = file.TensorData(*t);
    EXPECT_EQ(std::vector<uint8_t>(data.begin(), data.end()), *want[i].second) << t->name;
  }
  EXPECT_EQ(file.FindTensor("c")->dims, (std::vector<int64_t>{64, 1, 2}));
  EXPECT_EQ(file.FindTensor("c")->rows(), 2);
  EXPECT_EQ(file.FindTensor("c")->num_elements, 128);
  EXPECT_EQ(file.FindTensor("d")->type, GgmlType::kQ8_0);
  EXPECT_EQ(file.FindTensor("zz"), nullptr);
}

TEST(GgufOpen, MissingFileAndDirectory) {
  absl::StatusOr<std::unique_ptr<GgufFile>> missing = GgufFile::Open("/nonexistent/x.gguf");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/x.gguf"));
  EXPECT_FALSE(GgufFile::Open(::testing::TempDir()).ok());
}

TEST(GgufOpen, BundledModel) {
  const std::string path = TPSERVE_MODEL_PATH;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model file not present: " << path;
  absl::StatusOr<std::unique_ptr<GgufFile>> opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const GgufFile& file = **opened;
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 32u);
  EXPECT_EQ(file.keys().size(), 33u);
  EXPECT_EQ(file.tensors().size(), 272u);
  EXPECT_EQ(*file.GetString("general.architecture"), "llama");
  EXPECT_EQ(file.GetStringArray("tokenizer.ggml.tokens")->size(), 49152u);
  EXPECT_EQ(file.GetIntArray("tokenizer.ggml.token_type")->size(), 49152u);
  EXPECT_EQ(file.header_bytes().size() % 32, 0u);
  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::kQ8_0);
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(embd->num_bytes, 576u / 32 * 34 * 49152);
  EXPECT_EQ(file.FindTensor("blk.0.attn_q.weight")->type, GgmlType::kQ4_1);
  EXPECT_EQ(file.FindTensor("output_norm.weight")->type, GgmlType::kF32);
  uint64_t data_bytes = 0;
  for (const GgufTensorInfo& t : file.tensors()) data_bytes += t.num_bytes;
  EXPECT_LE(file.header_bytes().size() + data_bytes, file.file_size());
}

}  // namespace
}  // namespace tpserve
