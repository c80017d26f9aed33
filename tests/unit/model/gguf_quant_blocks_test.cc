// Dequantization of hand-built blocks of every supported type against values worked out on
// paper: each test picks the quantized integers, scales and minimums, packs them into the bytes
// of the ggml block layout, and expects exactly scale * q (+ min) back.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/dequantize.h"
#include "model/ggml_type.h"
#include "model/gguf_file.h"

namespace tpserve {
namespace {

// fp16 bit patterns of the scales used below (all exact).
constexpr uint16_t kHalfOne = 0x3C00;           // 1.0
constexpr uint16_t kHalfTwo = 0x4000;           // 2.0
constexpr uint16_t kHalfHalf = 0x3800;          // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;       // 0.25
constexpr uint16_t kHalfMinusOne = 0xBC00;      // -1.0
constexpr uint16_t kHalfThreeEighths = 0x3600;  // 0.375

void PutU16(std::vector<uint8_t>* out, uint16_t v) {
  out->push_back(static_cast<uint8_t>(v & 0xFF));
  out->push_back(static_cast<uint8_t>(v >> 8));
}

std::vector<float> Decode(GgmlType type, const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());
  const absl::Status status = Dequantize(type, bytes, absl::MakeSpan(out));
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

TEST(GgmlTypeTraits, BlockSizesMatchGgml) {
  struct Row {
    uint32_t type;
    int64_t elements;
    int64_t bytes;
  };
  for (const Row& row : std::vector<Row>{{0, 1, 4},
                                         {1, 1, 2},
                                         {2, 32, 18},
                                         {3, 32, 20},
                                         {8, 32, 34},
                                         {12, 256, 144},
                                         {13, 256, 176},
                                         {14, 256, 210},
                                         {30, 1, 2},
                                         {1000, 1, 1}}) {  // F8_E4M3: HF views only
    const auto traits = GetGgmlTypeTraits(row.type);
    ASSERT_TRUE(traits.has_value()) << row.type;
    EXPECT_EQ(traits->block_elements, row.elements) << traits->name;
    EXPECT_EQ(traits->block_bytes, row.bytes) << traits->name;
  }
  EXPECT_FALSE(GetGgmlTypeTraits(6).has_value());  // Q5_0: not decoded here
  EXPECT_FALSE(GetGgmlTypeTraits(1001).has_value());
}

TEST(Fp16ToFp32, EveryBitPatternMatchesTheDefinition) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const int sign = (bits >> 15) ? -1 : 1;
    const int exponent = (bits >> 10) & 0x1F;
    const int mantissa = bits & 0x3FF;
    const float got = Fp16ToFp32(static_cast<uint16_t>(bits));
    if (exponent == 31) {
      if (mantissa == 0) {
        EXPECT_EQ(got, sign * std::numeric_limits<float>::infinity()) << bits;
      } else {
        EXPECT_TRUE(std::isnan(got)) << bits;
      }
      continue;
    }
    const double want = exponent == 0 ? sign * std::ldexp(mantissa, -24)
                                      : sign * std::ldexp(1024 + mantissa, exponent - 25);
    EXPECT_EQ(got, static_cast<float>(want)) << bits;
    EXPECT_EQ(std::signbit(got), sign < 0) << bits;
  }
}

TEST(Dequantize, F32IsACopy) {
  const std::vector<float> values = {1.5f, -2.25f, 0.0f, 1e-30f, 3.0e38f, -0.0f, 7.0f, 8.0f};
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  const std::vector<float> got = Decode(GgmlType::kF32, bytes, values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(std::memcmp(&got[i], &values[i], 4), 0) << i;
  }
}

TEST(Dequantize, F16KnownValues) {
  const std::vector<std::pair<uint16_t, float>> cases = {{0x3C00, 1.0f},
                                                         {0xC000, -2.0f},
                                                         {0x3555, 0.333251953125f},
                                                         {0x7BFF, 65504.0f},
                                                         {0x0400, 0x1p-14f},
                                                         {0x0001, 0x1p-24f},
                                                         {0x03FF, 1023 * 0x1p-24f},
                                                         {0x0000, 0.0f},
                                                         {0x7C00, INFINITY},
                                                         {0xFC00, -INFINITY},
                                                         {0x3800, 0.5f},
                                                         {0xB400, -0.25f}};
  std::vector<uint8_t> bytes;
  for (const auto& c : cases) PutU16(&bytes, c.first);
  const std::vector<float> got = Decode(GgmlType::kF16, bytes, cases.size());
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(got[i], cases[i].second) << i;

  const std::vector<uint8_t> specials = {0x00, 0x80, 0x00, 0x7E};  // -0.0, NaN
  const std::vector<float> s = Decode(GgmlType::kF16, specials, 2);
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_TRUE(std::signbit(s[0]));
  EXPECT_TRUE(std::isnan(s[1]));
}

TEST(Dequantize, F16TablePathAgreesWithScalarForEveryPattern) {
  std::vector<uint8_t> bytes;
  for (uint32_t h = 0; h < 65536; ++h) PutU16(&bytes, static_cast<uint16_t>(h));
  const std::vector<float> got = Decode(GgmlType::kF16, bytes, 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = Fp16ToFp32(static_cast<uint16_t>(h));
    ASSERT_EQ(std::memcmp(&got[h], &want, 4), 0) << h;
  }
}

TEST(Dequantize, Bf16KnownValues) {
  const std::vector<std::pair<uint16_t, float>> cases = {
      {0x3F80, 1.0f},     {0xC040, -3.0f}, {0x4049, 3.140625f}, {0x0000, 0.0f},
      {0x7F80, INFINITY}, {0x3E80, 0.25f}, {0x4780, 65536.0f},  {0x0080, 0x1p-126f}};
  std::vector<uint8_t> bytes;
  for (const auto& c : cases) PutU16(&bytes, c.first);
  const std::vector<float> got = Decode(GgmlType::kBF16, bytes, cases.size());
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(got[i], cases[i].second) << i;
  EXPECT_EQ(Bf16ToFp32(0x3F80), 1.0f);
}

// Q8_0: fp16 d, then 32 signed bytes; x = q * d.
TEST(Dequantize, Q8_0) {
  std::vector<uint8_t> bytes;
  PutU16(&bytes, kHalfHalf);  // block 0: d = 0.5, q = j - 16
  for (int j = 0; j < 32; ++j) bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
  PutU16(&bytes, kHalfMinusOne);  // block 1: d = -1, q spans the int8 range
  const int8_t extremes[4] = {-128, 127, 0, -1};
  for (int j = 0; j < 32; ++j) bytes.push_back(static_cast<uint8_t>(extremes[j % 4]));
  ASSERT_EQ(bytes.size(), 68u);

  const std::vector<float> got = Decode(GgmlType::kQ8_0, bytes, 64);
  EXPECT_EQ(got[0], -8.0f);
  EXPECT_EQ(got[16], 0.0f);
  EXPECT_EQ(got[31], 7.5f);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(got[j], (j - 16) * 0.5f) << j;
  EXPECT_EQ(got[32], 128.0f);
  EXPECT_EQ(got[33], -127.0f);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(got[32 + j], -1.0f * extremes[j % 4]) << j;
}

// Q4_0: fp16 d, 16 bytes; element j < 16 is the low nibble of byte j, j + 16 its high nibble;
// x = (q - 8) * d.
TEST(Dequantize, Q4_0) {
  std::vector<uint8_t> bytes;
  PutU16(&bytes, kHalfTwo);
  for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  ASSERT_EQ(bytes.size(), 18u);

  const std::vector<float> got = Decode(GgmlType::kQ4_0, bytes, 32);
  EXPECT_EQ(got[0], -16.0f);   // q = 0
  EXPECT_EQ(got[8], 0.0f);     // q = 8
  EXPECT_EQ(got[15], 14.0f);   // q = 15
  EXPECT_EQ(got[16], 14.0f);   // high nibble of byte 0: q = 15
  EXPECT_EQ(got[31], -16.0f);  // high nibble of byte 15: q = 0
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(got[j], (j - 8) * 2.0f) << j;
    EXPECT_EQ(got[j + 16], (15 - j - 8) * 2.0f) << j;
  }
}

// Q4_1: fp16 d, fp16 m, 16 bytes (nibbles as Q4_0); x = q * d + m.
TEST(Dequantize, Q4_1) {
  std::vector<uint8_t> bytes;
  const auto q = [](int e) { return (e * 7 + 3) % 16; };
  PutU16(&bytes, kHalfHalf);      // d = 0.5
  PutU16(&bytes, kHalfMinusOne);  // m = -1
  for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(q(j) | (q(j + 16) << 4)));
  PutU16(&bytes, kHalfThreeEighths);  // second block: d = 0.375, m = 2
  PutU16(&bytes, kHalfTwo);
  for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(q(j) | (q(j + 16) << 4)));
  ASSERT_EQ(bytes.size(), 40u);

  const std::vector<float> got = Decode(GgmlType::kQ4_1, bytes, 64);
  EXPECT_EQ(got[0], 0.5f);   // q = 3: 1.5 - 1
  EXPECT_EQ(got[1], 4.0f);   // q = 10: 5 - 1
  EXPECT_EQ(got[16], 0.5f);  // high nibble of byte 0: q = 115 % 16 = 3
  for (int e = 0; e < 32; ++e) {
    EXPECT_EQ(got[e], q(e) * 0.5f - 1.0f) << e;
    EXPECT_EQ(got[32 + e], q(e) * 0.375f + 2.0f) << e;
  }
}

// Q4_K: 256 elements in 8 sub-blocks of 32. fp16 d, fp16 dmin, 12 bytes holding eight 6-bit
// scales and eight 6-bit mins, 128 bytes of nibbles; x = d * scale[s] * q - dmin * min[s].
// Scale-byte layout: for s < 4, byte s bits 0..5 = scale[s], byte s + 4 bits 0..5 = min[s];
// for s >= 4, byte s + 4 low nibble = scale[s] & 15, high nibble = min[s] & 15, and the top two
// bits of byte s - 4 / byte s carry scale[s] >> 4 / min[s] >> 4.
TEST(Dequantize, Q4_K) {
  const int scale[8] = {1, 2, 63, 17, 33, 45, 60, 5};
  const int min[8] = {0, 3, 7, 63, 20, 48, 1, 31};
  const auto q = [](int e) { return (e * 5 + 1) % 16; };

  uint8_t packed[12] = {};
  for (int s = 0; s < 4; ++s) {
    packed[s] = static_cast<uint8_t>(scale[s]);
    packed[s + 4] = static_cast<uint8_t>(min[s]);
  }
  for (int s = 4; s < 8; ++s) {
    packed[s + 4] = static_cast<uint8_t>((scale[s] & 15) | ((min[s] & 15) << 4));
    packed[s - 4] |= static_cast<uint8_t>((scale[s] >> 4) << 6);
    packed[s] |= static_cast<uint8_t>((min[s] >> 4) << 6);
  }
  // Element e lies in sub-block s = e / 32; sub-blocks 2c and 2c + 1 share bytes 32c..32c+31,
  // the even one in the low nibbles.
  uint8_t qs[128] = {};
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    const int byte = 32 * (s / 2) + e % 32;
    qs[byte] |= static_cast<uint8_t>(s % 2 == 0 ? q(e) : q(e) << 4);
  }
  std::vector<uint8_t> bytes;
  PutU16(&bytes, kHalfHalf);     // d = 0.5
  PutU16(&bytes, kHalfQuarter);  // dmin = 0.25
  bytes.insert(bytes.end(), packed, packed + 12);
  bytes.insert(bytes.end(), qs, qs + 128);
  ASSERT_EQ(bytes.size(), 144u);

  const std::vector<float> got = Decode(GgmlType::kQ4_K, bytes, 256);
  EXPECT_EQ(got[0], 0.5f * 1 * 1 - 0.0f);           // s = 0, q = 1
  EXPECT_EQ(got[64], 0.5f * 63 * 1 - 0.25f * 7);    // s = 2, q = (320 + 1) % 16 = 1
  EXPECT_EQ(got[255], 0.5f * 5 * 12 - 0.25f * 31);  // s = 7, q = 1276 % 16 = 12
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    EXPECT_EQ(got[e], 0.5f * scale[s] * q(e) - 0.25f * min[s]) << e;
  }
}

// Q5_K: Q4_K's d, dmin and 12 scale bytes, then qh[32], then qs[128] as Q4_K's; the fifth bit of
// sub-block s's element l is bit s of qh[l]. x = d * scale * q - dmin * min, q in 0..31.
TEST(Dequantize, Q5_K) {
  const int scale[8] = {3, 62, 1, 40, 17, 9, 63, 25};
  const int min[8] = {5, 0, 63, 12, 33, 2, 47, 18};
  const auto q = [](int e) { return (e * 7 + 3) % 32; };
  uint8_t packed[12] = {};
  for (int s = 0; s < 8; ++s) {
    if (s < 4) {
      packed[s] |= static_cast<uint8_t>(scale[s]);
      packed[s + 4] |= static_cast<uint8_t>(min[s]);
    } else {
      packed[s + 4] = static_cast<uint8_t>((scale[s] & 15) | ((min[s] & 15) << 4));
      packed[s - 4] |= static_cast<uint8_t>((scale[s] >> 4) << 6);
      packed[s] |= static_cast<uint8_t>((min[s] >> 4) << 6);
    }
  }
  uint8_t qh[32] = {}, qs[128] = {};
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    qs[32 * (s / 2) + e % 32] |= static_cast<uint8_t>((q(e) & 15) << (s % 2 == 0 ? 0 : 4));
    qh[e % 32] |= static_cast<uint8_t>((q(e) >> 4) << s);
  }
  std::vector<uint8_t> bytes;
  PutU16(&bytes, kHalfQuarter);  // d = 0.25
  PutU16(&bytes, kHalfHalf);     // dmin = 0.5
  bytes.insert(bytes.end(), packed, packed + 12);
  bytes.insert(bytes.end(), qh, qh + 32);
  bytes.insert(bytes.end(), qs, qs + 128);
  ASSERT_EQ(bytes.size(), 176u);

  const std::vector<float> got = Decode(GgmlType::kQ5_K, bytes, 256);
  EXPECT_EQ(got[0], 0.25f * 3 * 3 - 0.5f * 5);       // s = 0, q = 3
  EXPECT_EQ(got[255], 0.25f * 25 * 28 - 0.5f * 18);  // s = 7, q = 1788 % 32 = 28 (fifth bit set)
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    EXPECT_EQ(got[e], 0.25f * scale[s] * q(e) - 0.5f * min[s]) << e;
  }
}

// Q6_K: 256 elements as two halves of 128. ql[128], qh[64], int8 scales[16], fp16 d. In half h
// the element 128h + 32g + l (g < 4, l < 32) takes its low 4 bits from ql[64h + l + 32 * (g % 2)]
// (low nibble for g < 2, high for g >= 2) and its top 2 bits from bits 2g..2g+1 of
// qh[32h + l]; x = d * scale[(128h + 32g + l) / 16] * (q - 32).
TEST(Dequantize, Q6_K) {
  const auto q = [](int e) { return (e * 37 + 11) % 64; };
  const int8_t scales[16] = {1, -2, 3, -4, 5, 127, -128, 8, 9, -10, 11, 12, -13, 14, 15, -16};
  uint8_t ql[128] = {};
  uint8_t qh[64] = {};
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const int low = q(e) & 15, high = q(e) >> 4;
    ql[64 * h + l + 32 * (g % 2)] |= static_cast<uint8_t>(g < 2 ? low : low << 4);
    qh[32 * h + l] |= static_cast<uint8_t>(high << (2 * g));
  }
  std::vector<uint8_t> bytes(ql, ql + 128);
  bytes.insert(bytes.end(), qh, qh + 64);
  for (int8_t s : scales) bytes.push_back(static_cast<uint8_t>(s));
  PutU16(&bytes, kHalfQuarter);  // d = 0.25
  ASSERT_EQ(bytes.size(), 210u);

  const std::vector<float> got = Decode(GgmlType::kQ6_K, bytes, 256);
  EXPECT_EQ(got[0], 0.25f * 1 * (11 - 32));  // q(0) = 11
  EXPECT_EQ(got[80], 0.25f * 127 * ((80 * 37 + 11) % 64 - 32));
  EXPECT_EQ(got[96], 0.25f * -128 * ((96 * 37 + 11) % 64 - 32));
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(got[e], 0.25f * scales[e / 16] * (q(e) - 32)) << e;
  }
}

TEST(Dequantize, SeveralBlocksDecodeIndependently) {
  // Two Q4_K super-blocks with different d: the second must not reuse the first's scales.
  std::vector<uint8_t> bytes(288, 0);
  for (int b = 0; b < 2; ++b) {
    uint8_t* block = bytes.data() + 144 * b;
    const uint16_t d = b == 0 ? kHalfOne : kHalfTwo;
    block[0] = d & 0xFF;
    block[1] = d >> 8;
    for (int s = 0; s < 4; ++s) block[4 + s] = 1;        // scale 1 for sub-blocks 0..3
    for (int s = 4; s < 8; ++s) block[4 + s + 4] = 1;    // scale 1 for sub-blocks 4..7
    for (int i = 0; i < 128; ++i) block[16 + i] = 0x33;  // q = 3 everywhere
  }
  const std::vector<float> got = Decode(GgmlType::kQ4_K, bytes, 512);
  for (int e = 0; e < 256; ++e) ASSERT_EQ(got[e], 3.0f) << e;
  for (int e = 256; e < 512; ++e) ASSERT_EQ(got[e], 6.0f) << e;
}

TEST(Dequantize, RejectsSizeMismatches) {
  std::vector<float> out(32);
  std::vector<uint8_t> bytes(33);
  absl::Status s = Dequantize(GgmlType::kQ8_0, bytes, absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("34 bytes, got 33"));

  std::vector<float> odd(31);
  s = Dequantize(GgmlType::kQ4_1, std::vector<uint8_t>(20), absl::MakeSpan(odd));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("whole number"));

  EXPECT_TRUE(Dequantize(GgmlType::kQ6_K, {}, {}).ok());
  EXPECT_EQ(*GgmlBytesFor(GgmlType::kQ6_K, 512), 420u);
  EXPECT_FALSE(GgmlBytesFor(GgmlType::kQ4_K, 100).ok());
  EXPECT_FALSE(GgmlBytesFor(GgmlType::kF32, -1).ok());
  EXPECT_FALSE(GgmlBytesFor(GgmlType::kF32, std::numeric_limits<int64_t>::max()).ok());
}

// The bundled model's tensors decode to finite values of plausible magnitude.
TEST(Dequantize, BundledModelTensors) {
  const std::string path = TPSERVE_MODEL_PATH;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model file not present: " << path;
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();

  int64_t total = 0;
  double seconds = 0;
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    std::vector<float> out(static_cast<size_t>(t.num_elements));
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(Dequantize(t.type, (*file)->TensorData(t), absl::MakeSpan(out)).ok()) << t.name;
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    total += t.num_elements;
    double max_abs = 0;
    for (float v : out) {
      ASSERT_TRUE(std::isfinite(v)) << t.name;
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(v)));
    }
    EXPECT_GT(max_abs, 0.0) << t.name;
    EXPECT_LT(max_abs, 1000.0) << t.name;
  }
  EXPECT_EQ(total, 134515008);
  std::printf("dequantized %lld elements in %.3f s (%.0f M elements/s)\n",
              static_cast<long long>(total), seconds, total / seconds / 1e6);
}

}  // namespace
}  // namespace tpserve
