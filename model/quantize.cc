#include "model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tpserve {
namespace {

uint16_t ToBits(_Float16 h) {
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof(bits));
  return bits;
}

uint16_t Fp32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);  // round to even
}

void AppendU16(uint16_t v, std::vector<uint8_t>* out) {
  out->push_back(static_cast<uint8_t>(v));
  out->push_back(static_cast<uint8_t>(v >> 8));
}

// `v` as an fp16 scale stores it: the encoders round codes against the stored scale.
float Fp16Rounded(float v) { return static_cast<float>(static_cast<_Float16>(v)); }

// One Q4_0 block: d = max|x| / 7, q = round(x / d) + 8 in [0, 15].
void EncodeQ4_0(const float* x, std::vector<uint8_t>* out) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = Fp16Rounded(amax / 7.0f);
  AppendU16(ToBits(static_cast<_Float16>(d)), out);
  uint8_t q[32];
  for (int i = 0; i < 32; ++i) {
    q[i] = static_cast<uint8_t>(d == 0 ? 8 : std::clamp(std::lround(x[i] / d) + 8, 0L, 15L));
  }
  for (int j = 0; j < 16; ++j) out->push_back(static_cast<uint8_t>(q[j] | q[j + 16] << 4));
}

// One Q4_1 block: d = (max - min) / 15, m = min, q = round((x - m) / d) in [0, 15].
void EncodeQ4_1(const float* x, std::vector<uint8_t>* out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < 32; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float d = Fp16Rounded((hi - lo) / 15.0f), m = Fp16Rounded(lo);
  AppendU16(ToBits(static_cast<_Float16>(d)), out);
  AppendU16(ToBits(static_cast<_Float16>(m)), out);
  uint8_t q[32];
  for (int i = 0; i < 32; ++i) {
    q[i] = static_cast<uint8_t>(d == 0 ? 0 : std::clamp(std::lround((x[i] - m) / d), 0L, 15L));
  }
  for (int j = 0; j < 16; ++j) out->push_back(static_cast<uint8_t>(q[j] | q[j + 16] << 4));
}

// One Q4_K (`bits` 4) or Q5_K (5) super-block: per 32 elements a range [lo, hi] with lo <= 0,
// scale (hi - lo) / (2^bits - 1) and min -lo, both as 6-bit multiples of the super-block's d and
// dmin; Q5_K's fifth bits go to qh[32] before the nibbles.
void EncodeKWithMins(const float* x, int bits, std::vector<uint8_t>* out) {
  const int top = (1 << bits) - 1;
  float scale[8], min[8], max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float lo = 0, hi = 0;
    for (int i = 0; i < 32; ++i) {
      lo = std::min(lo, x[32 * j + i]);
      hi = std::max(hi, x[32 * j + i]);
    }
    scale[j] = (hi - lo) / static_cast<float>(top);
    min[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, min[j]);
  }
  const float d = Fp16Rounded(max_scale / 63.0f), dmin = Fp16Rounded(max_min / 63.0f);
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d == 0 ? 0 : std::min(63, static_cast<int>(std::lround(scale[j] / d)));
    m[j] = dmin == 0 ? 0 : std::min(63, static_cast<int>(std::lround(min[j] / dmin)));
  }
  AppendU16(ToBits(static_cast<_Float16>(d)), out);
  AppendU16(ToBits(static_cast<_Float16>(dmin)), out);
  // The 12 scale bytes, as model/dequantize.cc's Q4KScaleMin reads them.
  uint8_t bytes[12] = {};
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      bytes[j] |= static_cast<uint8_t>(sc[j]);
      bytes[j + 4] |= static_cast<uint8_t>(m[j]);
    } else {
      bytes[j + 4] = static_cast<uint8_t>((sc[j] & 0x0F) | (m[j] & 0x0F) << 4);
      bytes[j - 4] |= static_cast<uint8_t>(sc[j] >> 4 << 6);
      bytes[j] |= static_cast<uint8_t>(m[j] >> 4 << 6);
    }
  }
  out->insert(out->end(), bytes, bytes + 12);
  uint8_t q[256];
  for (int n = 0; n < 256; ++n) {
    const float step = d * static_cast<float>(sc[n / 32]);
    const float offset = dmin * static_cast<float>(m[n / 32]);
    q[n] = static_cast<uint8_t>(
        step == 0 ? 0 : std::clamp(std::lround((x[n] + offset) / step), 0L, long{top}));
  }
  if (bits == 5) {
    uint8_t qh[32] = {};
    for (int n = 0; n < 256; ++n) qh[n % 32] |= static_cast<uint8_t>((q[n] >> 4) << (n / 32));
    out->insert(out->end(), qh, qh + 32);
    for (uint8_t& code : q) code &= 0x0F;
  }
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      out->push_back(static_cast<uint8_t>(q[64 * c + l] | q[64 * c + 32 + l] << 4));
    }
  }
}

// One Q6_K super-block: per 16 elements a scale max|x| / 31 as an int8 multiple of d, codes
// round(x / (d * scale)) + 32 in [0, 63].
void EncodeQ6_K(const float* x, std::vector<uint8_t>* out) {
  float scale[16], max_scale = 0;
  for (int j = 0; j < 16; ++j) {
    float amax = 0;
    for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[16 * j + i]));
    scale[j] = amax / 31.0f;
    max_scale = std::max(max_scale, scale[j]);
  }
  const float d = Fp16Rounded(max_scale / 127.0f);
  int8_t sc[16];
  uint8_t q[256];
  for (int j = 0; j < 16; ++j) {
    sc[j] = static_cast<int8_t>(d == 0 ? 0 : std::min(127L, std::lround(scale[j] / d)));
  }
  for (int n = 0; n < 256; ++n) {
    const float step = d * static_cast<float>(sc[n / 16]);
    q[n] =
        static_cast<uint8_t>(step == 0 ? 32 : std::clamp(std::lround(x[n] / step) + 32, 0L, 63L));
  }
  // ql, qh as model/dequantize.cc's DequantizeQ6_K reads them: per 128 elements, element l, l+32,
  // l+64, l+96 in the low nibble of ql[l], ql[l+32], high nibble of ql[l], ql[l+32], and top bits
  // in bit pairs 0, 2, 4, 6 of qh[l].
  uint8_t ql[128] = {}, qh[64] = {};
  for (int half = 0; half < 2; ++half) {
    const uint8_t* y = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      ql[64 * half + l] = static_cast<uint8_t>((y[l] & 0x0F) | (y[l + 64] & 0x0F) << 4);
      ql[64 * half + l + 32] = static_cast<uint8_t>((y[l + 32] & 0x0F) | (y[l + 96] & 0x0F) << 4);
      qh[32 * half + l] = static_cast<uint8_t>(y[l] >> 4 | (y[l + 32] >> 4) << 2 |
                                               (y[l + 64] >> 4) << 4 | (y[l + 96] >> 4) << 6);
    }
  }
  out->insert(out->end(), ql, ql + 128);
  out->insert(out->end(), qh, qh + 64);
  for (const int8_t s : sc) out->push_back(static_cast<uint8_t>(s));
  AppendU16(ToBits(static_cast<_Float16>(d)), out);
}

}  // namespace

bool CanEncode(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

std::vector<uint8_t> EncodeBlocks(absl::Span<const float> values, GgmlType type) {
  std::vector<uint8_t> out;
  switch (type) {
    case GgmlType::kF16:
      for (float v : values) AppendU16(ToBits(static_cast<_Float16>(v)), &out);
      break;
    case GgmlType::kBF16:
      for (float v : values) AppendU16(Fp32ToBf16(v), &out);
      break;
    case GgmlType::kQ8_0:
      for (size_t b = 0; b < values.size(); b += 32) {
        float amax = 0;
        for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(values[i]));
        const float d = amax / 127.0f;
        AppendU16(ToBits(static_cast<_Float16>(d)), &out);
        for (size_t i = b; i < b + 32; ++i) {
          out.push_back(
              static_cast<uint8_t>(static_cast<int8_t>(d == 0 ? 0 : std::lround(values[i] / d))));
        }
      }
      break;
    case GgmlType::kQ4_0:
      for (size_t b = 0; b < values.size(); b += 32) EncodeQ4_0(&values[b], &out);
      break;
    case GgmlType::kQ4_1:
      for (size_t b = 0; b < values.size(); b += 32) EncodeQ4_1(&values[b], &out);
      break;
    case GgmlType::kQ4_K:
      for (size_t b = 0; b < values.size(); b += 256) EncodeKWithMins(&values[b], 4, &out);
      break;
    case GgmlType::kQ5_K:
      for (size_t b = 0; b < values.size(); b += 256) EncodeKWithMins(&values[b], 5, &out);
      break;
    case GgmlType::kQ6_K:
      for (size_t b = 0; b < values.size(); b += 256) EncodeQ6_K(&values[b], &out);
      break;
    default:
      out.resize(values.size() * sizeof(float));
      std::memcpy(out.data(), values.data(), out.size());
  }
  return out;
}

}  // namespace tpserve
