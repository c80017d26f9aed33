#include "model/dequantize.h"

#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "kernels/cpu/fp8_e4m3.h"

namespace tpserve {
namespace {

// The headers use std::string_view; this Abseil build's string_view is its own type.
absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

static_assert(std::endian::native == std::endian::little,
              "GGUF data is little-endian; this decoder reads it in place");

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Every fp16 value decoded once: [65536] floats, built on first use (thread-safe).
const float* Fp16Table() {
  static const std::unique_ptr<std::array<float, 65536>> table = [] {
    auto t = std::make_unique<std::array<float, 65536>>();
    for (uint32_t h = 0; h < 65536; ++h) (*t)[h] = Fp16ToFp32(static_cast<uint16_t>(h));
    return t;
  }();
  return table->data();
}

void DequantizeF32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void DequantizeF16(const uint8_t* src, float* dst, int64_t n) {
  const float* table = Fp16Table();
  for (int64_t i = 0; i < n; ++i) dst[i] = table[LoadU16(src + 2 * i)];
}

void DequantizeBf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = std::bit_cast<float>(static_cast<uint32_t>(LoadU16(src + 2 * i)) << 16);
  }
}

// Q4_0 block (18 bytes): fp16 d, qs[16]. Element j < 16 is the low nibble of qs[j], element
// j + 16 the high nibble; x = (q - 8) * d.
void DequantizeQ4_0(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 18, dst += 32) {
    const float d = Fp16ToFp32(LoadU16(src));
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

// Q4_1 block (20 bytes): fp16 d, fp16 m, qs[16]; nibble order as Q4_0; x = q * d + m.
void DequantizeQ4_1(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 20, dst += 32) {
    const float d = Fp16ToFp32(LoadU16(src));
    const float m = Fp16ToFp32(LoadU16(src + 2));
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
      dst[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// Q8_0 block (34 bytes): fp16 d, int8 qs[32]; x = q * d.
void DequantizeQ8_0(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 34, dst += 32) {
    const float d = Fp16ToFp32(LoadU16(src));
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(qs[j]) * d;
  }
}

// The 6-bit scale and min of sub-block `j` (0..7) packed in Q4_K's 12 scale bytes: bytes 0..3
// hold scales 0..3 in their low 6 bits, bytes 4..7 mins 0..3; sub-blocks 4..7 take their low
// 4 bits from the nibbles of bytes 8..11 and their high 2 bits from the top bits of bytes 0..7.
inline void Q4KScaleMin(int j, const uint8_t* s, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 0x3F;
    *min = s[j + 4] & 0x3F;
  } else {
    *scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K super-block (144 bytes, 256 elements): fp16 d, fp16 dmin, scales[12], qs[128]. Each
// 64-element chunk c uses 32 bytes of qs: low nibbles are sub-block 2c, high nibbles 2c + 1.
// Q5_K (176 bytes, `fifth_bit`): the same with qh[32] between scales and qs, bit j of qh[l] being
// the fifth bit of sub-block j's element l. x = (d * scale) * q - (dmin * min).
void DequantizeKWithMins(const uint8_t* src, float* dst, int64_t num_blocks, bool fifth_bit) {
  const int64_t block_bytes = fifth_bit ? 176 : 144;
  for (int64_t b = 0; b < num_blocks; ++b, src += block_bytes, dst += 256) {
    const float d = Fp16ToFp32(LoadU16(src));
    const float dmin = Fp16ToFp32(LoadU16(src + 2));
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + (fifth_bit ? 48 : 16);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      Q4KScaleMin(j, scales, &sc, &m);
      const float scale = d * static_cast<float>(sc);
      const float min = dmin * static_cast<float>(m);
      const uint8_t* q = qs + 32 * (j / 2);
      for (int l = 0; l < 32; ++l) {
        int code = j % 2 == 0 ? q[l] & 0x0F : q[l] >> 4;
        if (fifth_bit) code |= ((qh[l] >> j) & 1) << 4;
        dst[32 * j + l] = scale * static_cast<float>(code) - min;
      }
    }
  }
}

// Q6_K super-block (210 bytes, 256 elements): ql[128], qh[64], int8 scales[16], fp16 d. Each
// 128-element half h uses ql[64h..64h+63], qh[32h..32h+31] and scales[8h..8h+7]; for l < 32 the
// four elements l, l+32, l+64, l+96 take their low 4 bits from ql[l] low, ql[l+32] low, ql[l]
// high, ql[l+32] high and their top 2 bits from bit pairs 0, 2, 4, 6 of qh[l];
// x = (d * scale) * (q - 32), with one scale per 16 elements.
void DequantizeQ6_K(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 210, dst += 256) {
    const float d = Fp16ToFp32(LoadU16(src + 208));
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = src + 64 * half;
      const uint8_t* qh = src + 128 + 32 * half;
      const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192) + 8 * half;
      float* y = dst + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

}  // namespace

float Fp16ToFp32(uint16_t bits) { return HalfToFloat(bits); }

float Bf16ToFp32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

absl::StatusOr<uint64_t> GgmlBytesFor(GgmlType type, int64_t num_elements) {
  const std::optional<GgmlTypeTraits> traits = GetGgmlTypeTraits(static_cast<uint32_t>(type));
  if (!traits.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ggml type ", static_cast<uint32_t>(type), " is not supported"));
  }
  if (num_elements < 0 || num_elements % traits->block_elements != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(num_elements, " elements of ", View(traits->name),
                     " are not a whole number of ", traits->block_elements, "-element blocks"));
  }
  const uint64_t blocks = static_cast<uint64_t>(num_elements / traits->block_elements);
  const uint64_t block_bytes = static_cast<uint64_t>(traits->block_bytes);
  if (blocks > std::numeric_limits<uint64_t>::max() / block_bytes) {
    return absl::OutOfRangeError(
        absl::StrCat(num_elements, " elements of ", View(traits->name), " overflow a 64-bit size"));
  }
  return blocks * block_bytes;
}

absl::Status Dequantize(GgmlType type, absl::Span<const uint8_t> src, absl::Span<float> dst) {
  const int64_t n = static_cast<int64_t>(dst.size());
  absl::StatusOr<uint64_t> want_bytes = GgmlBytesFor(type, n);
  if (!want_bytes.ok()) return want_bytes.status();
  if (src.size() != *want_bytes) {
    const absl::string_view name = View(GetGgmlTypeTraits(static_cast<uint32_t>(type))->name);
    return absl::InvalidArgumentError(absl::StrCat("dequantize: ", n, " elements of ", name,
                                                   " need ", *want_bytes, " bytes, got ",
                                                   src.size()));
  }
  if (n == 0) return absl::OkStatus();
  const uint8_t* s = src.data();
  float* d = dst.data();
  switch (type) {
    case GgmlType::kF32:
      DequantizeF32(s, d, n);
      break;
    case GgmlType::kF16:
      DequantizeF16(s, d, n);
      break;
    case GgmlType::kBF16:
      DequantizeBf16(s, d, n);
      break;
    case GgmlType::kQ4_0:
      DequantizeQ4_0(s, d, n / 32);
      break;
    case GgmlType::kQ4_1:
      DequantizeQ4_1(s, d, n / 32);
      break;
    case GgmlType::kQ8_0:
      DequantizeQ8_0(s, d, n / 32);
      break;
    case GgmlType::kQ4_K:
      DequantizeKWithMins(s, d, n / 256, /*fifth_bit=*/false);
      break;
    case GgmlType::kQ5_K:
      DequantizeKWithMins(s, d, n / 256, /*fifth_bit=*/true);
      break;
    case GgmlType::kQ6_K:
      DequantizeQ6_K(s, d, n / 256);
      break;
    case GgmlType::kF8E4M3:  // the codes' values; the caller applies the rows' scales
      for (int64_t i = 0; i < n; ++i) d[i] = cpu::FromE4m3(s[i]);
      break;
  }
  return absl::OkStatus();
}

}  // namespace tpserve
