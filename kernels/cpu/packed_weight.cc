#include "kernels/cpu/packed_weight.h"

#include <bit>
#include <cstring>

#include "common/check.h"
#include "common/half.h"
#include "kernels/cpu/parallel_for.h"

// Compiled with -ffp-contract=off (kernels/CMakeLists.txt): the decode q * d + m must round twice
// like ggml's reference, never fuse into one FMA.

namespace tpserve::cpu {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF blocks are little-endian");

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Row r's codes of one GGUF block into its place in a record (zeroed before): the layout of
// packed_weight.h, written out per format so that loading a large model stays fast.
template <BlockFormat kFormat>
void PackBlockCodes(const uint8_t* block, int r, uint8_t* record) {
  if constexpr (kFormat == BlockFormat::kQ8_0) {
    for (int g = 0; g < 8; ++g) std::memcpy(record + 64 * g + 4 * r, block + 2 + 4 * g, 4);
  } else {
    const uint8_t* qs = block + (kFormat == BlockFormat::kQ4_1 ? 4 : 2);
    for (int j = 0; j < 16; ++j) {  // element j is the low nibble of qs[j], element j + 16 the high
      const int at = 64 * (j / 8) + 4 * r + j % 4;
      const int shift = (j / 4) % 2 * 4;
      record[at] |= static_cast<uint8_t>((qs[j] & 0x0F) << shift);
      record[at + 128] |= static_cast<uint8_t>((qs[j] >> 4) << shift);
    }
  }
}

// The 6-bit scales and mins of Q4_K's 8 blocks from its 12 scale bytes: blocks 0..3 in the low 6
// bits of bytes 0..3 (scales) and 4..7 (mins); blocks 4..7 in the nibbles of bytes 8..11 with
// their top 2 bits in the top bits of bytes 0..3 and 4..7.
void DecodeQ4KScales(const uint8_t* bytes, uint8_t* scales, uint8_t* mins) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = bytes[j] & 0x3F;
    mins[j] = bytes[j + 4] & 0x3F;
    scales[j + 4] = static_cast<uint8_t>((bytes[j + 8] & 0x0F) | (bytes[j] >> 6) << 4);
    mins[j + 4] = static_cast<uint8_t>((bytes[j + 8] >> 4) | (bytes[j + 4] >> 6) << 4);
  }
}

void EncodeQ4KScales(const uint8_t* scales, const uint8_t* mins, uint8_t* bytes) {
  for (int j = 0; j < 4; ++j) {
    bytes[j] = static_cast<uint8_t>(scales[j] | (scales[j + 4] >> 4) << 6);
    bytes[j + 4] = static_cast<uint8_t>(mins[j] | (mins[j + 4] >> 4) << 6);
    bytes[j + 8] = static_cast<uint8_t>((scales[j + 4] & 0x0F) | (mins[j + 4] & 0x0F) << 4);
  }
}

// Where the 4-bit code of element e (0..31) of row r lies in a record: its byte and shift.
struct CodePlace {
  int byte;
  int shift;
};
inline CodePlace PlaceOf(int r, int e) { return {64 * (e / 8) + 4 * r + e % 4, (e / 4) % 2 * 4}; }

// Q4_K super-block element n's code: chunk n / 64 of qs, low nibbles first, then high.
inline int Q4KCode(const uint8_t* qs, int n) {
  const uint8_t byte = qs[32 * (n / 64) + n % 32];
  return n % 64 < 32 ? byte & 0x0F : byte >> 4;
}
// Q6_K super-block element n: its byte of ql and nibble, its byte of qh and bit pair, and its
// scale's index (model/dequantize.cc's layout).
struct Q6KPlace {
  int ql;
  bool ql_high;
  int qh;
  int qh_shift;
  int scale;
};
inline Q6KPlace Q6KPlaceOf(int n) {
  const int half = n / 128, quarter = n % 128 / 32, l = n % 32;
  return {64 * half + l + 32 * (quarter % 2), quarter >= 2, 32 * half + l, 2 * quarter,
          8 * half + l / 16 + 2 * quarter};
}

// One row's K-quant super-blocks into records and super-block factors.
template <BlockFormat kFormat>
void PackKRow(const uint8_t* blocks, int64_t row, PackedWeight* w) {
  const int r = static_cast<int>(row % kGroupRows);
  const int64_t supers = w->cols / kSuperBlockElements;
  const int64_t group = row / kGroupRows;
  for (int64_t sb = 0; sb < supers; ++sb) {
    const uint8_t* block = blocks + (row * supers + sb) * BlockBytes(kFormat);
    uint8_t* super = w->super.data() + (group * supers + sb) * w->super_bytes();
    uint8_t* records = w->data.data() + (group * w->blocks() + sb * 8) * w->record_bytes();
    if constexpr (kFormat == BlockFormat::kQ4_K || kFormat == BlockFormat::kQ5_K) {
      constexpr bool kQ5 = kFormat == BlockFormat::kQ5_K;
      const uint8_t* qs = block + (kQ5 ? 48 : 16);
      std::memcpy(super + 2 * r, block, 2);
      std::memcpy(super + 32 + 2 * r, block + 2, 2);
      uint8_t scales[8], mins[8];
      DecodeQ4KScales(block + 4, scales, mins);
      for (int j = 0; j < 8; ++j) {
        uint8_t* record = records + j * w->record_bytes();
        super[kKScalesOffset + 16 * j + r] =
            static_cast<uint8_t>((scales[j] & 0x0F) | mins[j] << 4);
        super[kKScalesOffset + 128 + 16 * (j % 4) + r] |=
            static_cast<uint8_t>((scales[j] >> 4 | (mins[j] >> 4) << 2) << (4 * (j / 4)));
        for (int e = 0; e < 32; ++e) {
          const CodePlace at = PlaceOf(r, e);
          record[at.byte] |= static_cast<uint8_t>(Q4KCode(qs, 32 * j + e) << at.shift);
          if constexpr (kQ5) {  // the fifth bit: bit j of qh[e], to bit e / 4 of its byte
            record[256 + 4 * r + e % 4] |=
                static_cast<uint8_t>(((block[16 + e] >> j) & 1) << e / 4);
          }
        }
      }
    } else {
      std::memcpy(super + 2 * r, block + 208, 2);
      for (int j = 0; j < 8; ++j) {
        uint8_t* record = records + j * w->record_bytes();
        for (int e = 0; e < 32; ++e) {
          const Q6KPlace from = Q6KPlaceOf(32 * j + e);
          const int low = from.ql_high ? block[from.ql] >> 4 : block[from.ql] & 0x0F;
          const int high = (block[128 + from.qh] >> from.qh_shift) & 3;
          const int whole = 64 * (e / 4 % 4) + 4 * r + e % 4;  // packed_weight.h's chunk g < 4
          if (e < 16) {
            record[whole] |= static_cast<uint8_t>(low | high << 4);
          } else {
            const CodePlace at = PlaceOf(r, e - 16);
            record[256 + at.byte] |= static_cast<uint8_t>(low << at.shift);
            record[whole] |= static_cast<uint8_t>(high << 6);
          }
          if (e % 16 == 0) record[384 + 16 * (e / 16) + r] = block[192 + from.scale];
        }
      }
    }
  }
}

template <BlockFormat kFormat>
void PackRows(const uint8_t* blocks, PackedWeight* w) {
  // Load time of a large model: threads take rows; every byte of a record belongs to one row.
  if constexpr (IsKQuant(kFormat)) {
    ParallelFor(w->rows, kGroupRows * 64, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) PackKRow<kFormat>(blocks, row, w);
    });
  } else {
    const int64_t block_bytes = BlockBytes(kFormat);
    const int64_t record_bytes = w->record_bytes();
    const int64_t code_bytes = w->code_bytes();
    ParallelFor(w->rows, kGroupRows * 64, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int r = static_cast<int>(row % kGroupRows);
        const uint8_t* block = blocks + row * w->blocks() * block_bytes;
        uint8_t* record = w->data.data() + row / kGroupRows * w->blocks() * record_bytes;
        for (int64_t b = 0; b < w->blocks(); ++b, block += block_bytes, record += record_bytes) {
          PackBlockCodes<kFormat>(block, r, record);
          std::memcpy(record + code_bytes + 2 * r, block, 2);
          if constexpr (kFormat == BlockFormat::kQ4_1) {
            std::memcpy(record + code_bytes + 2 * (kGroupRows + r), block + 2, 2);
          }
        }
      }
    });
  }
}

// PackKRow's inverse for one row.
void UnpackKRow(const PackedWeight& w, int64_t row, uint8_t* blocks) {
  const int r = static_cast<int>(row % kGroupRows);
  const int64_t supers = w.cols / kSuperBlockElements;
  for (int64_t sb = 0; sb < supers; ++sb) {
    uint8_t* block = blocks + (row * supers + sb) * BlockBytes(w.format);
    const uint8_t* super = w.super_factors(row / kGroupRows, sb * 8);
    if (w.format == BlockFormat::kQ4_K || w.format == BlockFormat::kQ5_K) {
      const bool q5 = w.format == BlockFormat::kQ5_K;
      std::memcpy(block, super + 2 * r, 2);
      std::memcpy(block + 2, super + 32 + 2 * r, 2);
      uint8_t scales[8], mins[8];
      for (int j = 0; j < 8; ++j) {
        const uint8_t* record = w.record(row / kGroupRows, sb * 8 + j);
        int scale, min;
        KScaleAndMin(super, j, r, &scale, &min);
        scales[j] = static_cast<uint8_t>(scale);
        mins[j] = static_cast<uint8_t>(min);
        for (int e = 0; e < 32; ++e) {
          const int n = 32 * j + e;
          const int code = PackedCode(w.format, record, r, e);
          block[(q5 ? 48 : 16) + 32 * (n / 64) + n % 32] |=
              static_cast<uint8_t>((code & 0x0F) << (n % 64 < 32 ? 0 : 4));
          if (q5) block[16 + e] |= static_cast<uint8_t>((code >> 4) << j);
        }
      }
      EncodeQ4KScales(scales, mins, block + 4);
    } else {
      std::memcpy(block + 208, super + 2 * r, 2);
      for (int j = 0; j < 8; ++j) {
        const uint8_t* record = w.record(row / kGroupRows, sb * 8 + j);
        for (int e = 0; e < 32; ++e) {
          const Q6KPlace to = Q6KPlaceOf(32 * j + e);
          const int code = PackedCode(w.format, record, r, e);
          block[to.ql] |= static_cast<uint8_t>((code & 0x0F) << (to.ql_high ? 4 : 0));
          block[128 + to.qh] |= static_cast<uint8_t>((code >> 4) << to.qh_shift);
          if (e % 16 == 0) block[192 + to.scale] = record[384 + 16 * (e / 16) + r];
        }
      }
    }
  }
}

}  // namespace

int64_t BlockBytes(BlockFormat format) {
  switch (format) {
    case BlockFormat::kQ4_0:
      return 18;
    case BlockFormat::kQ4_1:
      return 20;
    case BlockFormat::kQ8_0:
      return 34;
    case BlockFormat::kQ4_K:
      return 144;
    case BlockFormat::kQ5_K:
      return 176;
    case BlockFormat::kQ6_K:
      return 210;
  }
  TP_CHECK(false);
  return 0;
}

PackedWeight PackWeight(BlockFormat format, const uint8_t* blocks, int64_t rows, int64_t cols) {
  TP_CHECK(rows >= 0 && cols >= 0 && cols % GgufBlockElements(format) == 0);
  PackedWeight w;
  w.format = format;
  w.rows = rows;
  w.cols = cols;
  w.data.assign(w.groups() * w.blocks() * w.record_bytes(), 0);
  w.super.assign(w.groups() * (cols / kSuperBlockElements) * w.super_bytes(), 0);
  switch (format) {
    case BlockFormat::kQ4_0:
      PackRows<BlockFormat::kQ4_0>(blocks, &w);
      break;
    case BlockFormat::kQ4_1:
      PackRows<BlockFormat::kQ4_1>(blocks, &w);
      break;
    case BlockFormat::kQ8_0:
      PackRows<BlockFormat::kQ8_0>(blocks, &w);
      break;
    case BlockFormat::kQ4_K:
      PackRows<BlockFormat::kQ4_K>(blocks, &w);
      break;
    case BlockFormat::kQ5_K:
      PackRows<BlockFormat::kQ5_K>(blocks, &w);
      break;
    case BlockFormat::kQ6_K:
      PackRows<BlockFormat::kQ6_K>(blocks, &w);
      break;
  }
  return w;
}

std::vector<uint8_t> UnpackWeight(const PackedWeight& w) {
  const int64_t block_bytes = BlockBytes(w.format);
  std::vector<uint8_t> blocks(w.rows * (w.cols / GgufBlockElements(w.format)) * block_bytes, 0);
  if (IsKQuant(w.format)) {
    for (int64_t row = 0; row < w.rows; ++row) UnpackKRow(w, row, blocks.data());
    return blocks;
  }
  for (int64_t row = 0; row < w.rows; ++row) {
    const int r = static_cast<int>(row % kGroupRows);
    for (int64_t b = 0; b < w.blocks(); ++b) {
      const uint8_t* record = w.record(row / kGroupRows, b);
      const uint8_t* scales = record + w.code_bytes();
      uint8_t* block = blocks.data() + (row * w.blocks() + b) * block_bytes;
      std::memcpy(block, scales + 2 * r, 2);
      if (w.format == BlockFormat::kQ4_1) std::memcpy(block + 2, scales + 2 * (kGroupRows + r), 2);
      for (int e = 0; e < kBlockElements; ++e) {
        const uint8_t code = static_cast<uint8_t>(PackedCode(w.format, record, r, e));
        if (w.format == BlockFormat::kQ8_0) {
          block[2 + e] = code;
        } else {
          block[(w.format == BlockFormat::kQ4_1 ? 4 : 2) + e % 16] |=
              static_cast<uint8_t>(e < 16 ? code : code << 4);
        }
      }
    }
  }
  return blocks;
}

void DequantizePackedRows(const PackedWeight& w, int64_t first, int64_t count, float* out) {
  TP_CHECK(first >= 0 && count >= 0 && first + count <= w.rows);
  for (int64_t row = first; row < first + count; ++row) {
    const int r = static_cast<int>(row % kGroupRows);
    for (int64_t b = 0; b < w.blocks(); ++b) {
      const uint8_t* record = w.record(row / kGroupRows, b);
      const uint8_t* scales = record + w.code_bytes();
      float* dst = out + (row - first) * w.cols + b * kBlockElements;
      if (IsKQuant(w.format)) {
        const uint8_t* super = w.super_factors(row / kGroupRows, b);
        const float d = HalfToFloat(LoadU16(super + 2 * r));
        if (w.format == BlockFormat::kQ6_K) {
          for (int e = 0; e < kBlockElements; ++e) {
            const int8_t s = static_cast<int8_t>(scales[16 * (e / 16) + r]);
            dst[e] = d * static_cast<float>(s) *
                     static_cast<float>(PackedCode(w.format, record, r, e) - 32);
          }
        } else {  // Q4_K, Q5_K: the block's scale and min, once
          int block_scale, block_min;
          KScaleAndMin(super, static_cast<int>(b % 8), r, &block_scale, &block_min);
          const float scale = d * static_cast<float>(block_scale);
          const float min =
              HalfToFloat(LoadU16(super + 32 + 2 * r)) * static_cast<float>(block_min);
          for (int e = 0; e < kBlockElements; ++e) {
            dst[e] = scale * static_cast<float>(PackedCode(w.format, record, r, e)) - min;
          }
        }
        continue;
      }
      const float d = HalfToFloat(LoadU16(scales + 2 * r));
      for (int e = 0; e < kBlockElements; ++e) {
        const int code = PackedCode(w.format, record, r, e);
        switch (w.format) {
          case BlockFormat::kQ4_0:
            dst[e] = static_cast<float>(code - 8) * d;
            break;
          case BlockFormat::kQ4_1:
            dst[e] =
                static_cast<float>(code) * d + HalfToFloat(LoadU16(scales + 2 * (kGroupRows + r)));
            break;
          case BlockFormat::kQ8_0:
            dst[e] = static_cast<float>(code) * d;
            break;
          case BlockFormat::kQ4_K:
          case BlockFormat::kQ5_K:
          case BlockFormat::kQ6_K:
            break;  // above
        }
      }
    }
  }
}

}  // namespace tpserve::cpu
