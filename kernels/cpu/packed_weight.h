// A linear weight in a GGUF block format (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K), rearranged once at
// load so that the integer products of packed_matmul.h read sixteen weight rows as one vector.
//
// Rows are taken in groups of 16 (the last group padded with zero rows). For each group and each
// 32-element block there is one record, records ordered block after block within a group, group
// after group:
//   codes  Q4_x, Q4_K: 4 chunks of 64 bytes. In chunk p, byte 4r + e holds in its low nibble the
//                code of element 8p + e of row r, in its high nibble that of element 8p + 4 + e.
//          Q5_K: the low 4 bits as Q4_x, then 64 bytes of fifth bits: bit g of byte 4r + e is
//                the fifth bit of element 4g + e.
//          Q6_K: 6 chunks of 64 bytes. In chunk g < 4, byte 4r + e holds in bits 0-5 the code of
//                element 4g + e of row r, in bits 6 and 7 the top 2 bits of element 16 + 4g + e;
//                chunks 4 and 5 hold the low 4 bits of elements 16..31 as Q4_x's chunks 0 and 1
//                do those of elements 0..15. Half the codes are then unpacked by one mask.
//          Q8_0: 8 chunks of 64 bytes. In chunk g, byte 4r + e is q of element 4g + e of row r.
//   scales Q4_0, Q8_0: 16 fp16 d, each row's block scale; Q4_1: then 16 fp16 m, the minimums.
//          Q4_K, Q5_K: none (in the super-block entry below).
//          Q6_K: 16 int8 scales of elements 0..15, then 16 of elements 16..31.
// K-quants keep their super-block factors (per 256 elements) apart, one entry per group and
// super-block: Q6_K 16 fp16 d; Q4_K and Q5_K 16 fp16 d, 16 fp16 dmin, then the 6-bit scales and
// mins of the 8 blocks (KScaleAndMin): byte 16j + r holds the low 4 bits of row r's scale of block
// j in its low nibble and those of its min in its high nibble; byte 128 + 16(j % 4) + r, from bit
// 4(j / 4) up, the top 2 bits of that scale, then of that min.
// Unpacked, the codes are 8 rows of 16 x 4 bytes: the operand of one vpdpbusd per 4 elements
// against a broadcast activation dword, and exactly AMX's B tile for K = 32. The same bits as the
// GGUF blocks, rearranged, and no larger, but for the padding rows.
#pragma once

#include <cstdint>
#include <vector>

namespace tpserve::cpu {

// The block formats of ggml-common.h read here.
//   Q4_0: fp16 d, qs[16]           (18 bytes per 32)  w = ((q & 0xF) - 8) * d
//   Q4_1: fp16 d, fp16 m, qs[16]   (20 bytes per 32)  w = (q & 0xF) * d + m
//   Q8_0: fp16 d, int8 qs[32]      (34 bytes per 32)  w = q * d
//   Q4_K: fp16 d, fp16 dmin, scales[12], qs[128]  (144 bytes per 256): 8 blocks of 32 with 6-bit
//         scale s and min m each, w = (d * s) * q - (dmin * m)
//   Q5_K: Q4_K's fields and qh[32] before qs  (176 bytes per 256): 5-bit q, the fifth bit of
//         block j's element l is bit j of qh[l]
//   Q6_K: ql[128], qh[64], int8 scales[16], fp16 d  (210 bytes per 256): 6-bit q, one scale per
//         16 elements, w = (d * s) * (q - 32)
// In Q4_x, element j < 16 is the low nibble of qs[j] and element j + 16 its high nibble; the
// K-quant layouts are model/dequantize.cc's.
enum class BlockFormat { kQ4_0, kQ4_1, kQ8_0, kQ4_K, kQ5_K, kQ6_K };

inline constexpr int64_t kBlockElements = 32;
inline constexpr int64_t kGroupRows = 16;
inline constexpr int64_t kSuperBlockElements = 256;  // K-quants

constexpr bool IsKQuant(BlockFormat format) {
  return format == BlockFormat::kQ4_K || format == BlockFormat::kQ5_K ||
         format == BlockFormat::kQ6_K;
}
// Elements of one GGUF block of `format`: 32, or 256 for the K-quants.
constexpr int64_t GgufBlockElements(BlockFormat format) {
  return IsKQuant(format) ? kSuperBlockElements : kBlockElements;
}
// Bytes of one GGUF block of `format`.
int64_t BlockBytes(BlockFormat format);

// Bytes of the codes of one (group, block) record of `format`, and of the whole record: the
// scales follow the codes, two bytes a row per fp16 scale, Q6_K's two int8 scales a row; Q4_K's
// and Q5_K's are in PackedWeight::super.
constexpr int64_t CodeBytes(BlockFormat format) {
  switch (format) {
    case BlockFormat::kQ8_0:
      return 512;
    case BlockFormat::kQ5_K:
      return 256 + 64;
    case BlockFormat::kQ6_K:
      return 256 + 128;
    default:
      return 256;
  }
}
constexpr int64_t RecordBytes(BlockFormat format) {
  switch (format) {
    case BlockFormat::kQ4_K:
    case BlockFormat::kQ5_K:
      return CodeBytes(format);
    case BlockFormat::kQ6_K:
    case BlockFormat::kQ4_0:
    case BlockFormat::kQ8_0:
      return CodeBytes(format) + 2 * kGroupRows;
    case BlockFormat::kQ4_1:
      return CodeBytes(format) + 4 * kGroupRows;
  }
  return 0;
}

// Q4_K, Q5_K: where the 8 blocks' scales and mins start in a super-block entry (after the fp16 d
// and dmin of its 16 rows).
inline constexpr int64_t kKScalesOffset = 4 * kGroupRows;

// K-quants: bytes of one (group, super-block) entry of PackedWeight::super: the fp16 d of its 16
// rows; Q4_K and Q5_K then dmin and the 6-bit scales and mins of the 8 blocks (12 bytes a row).
constexpr int64_t SuperBytes(BlockFormat format) {
  switch (format) {
    case BlockFormat::kQ4_K:
    case BlockFormat::kQ5_K:
      return kKScalesOffset + 12 * kGroupRows;
    case BlockFormat::kQ6_K:
      return 2 * kGroupRows;
    default:
      return 0;
  }
}

struct PackedWeight {
  BlockFormat format = BlockFormat::kQ8_0;
  int64_t rows = 0;
  int64_t cols = 0;  // a multiple of GgufBlockElements(format)
  std::vector<uint8_t> data;
  std::vector<uint8_t> super;  // K-quants: the super-block factors, per (group, super-block)

  int64_t blocks() const { return cols / kBlockElements; }
  int64_t groups() const { return (rows + kGroupRows - 1) / kGroupRows; }
  int64_t record_bytes() const { return RecordBytes(format); }
  int64_t code_bytes() const { return CodeBytes(format); }
  const uint8_t* record(int64_t group, int64_t block) const {
    return data.data() + (group * blocks() + block) * record_bytes();
  }
  // K-quants: bytes of one (group, super-block) entry of `super`, and the entry of a block's.
  int64_t super_bytes() const { return SuperBytes(format); }
  const uint8_t* super_factors(int64_t group, int64_t block) const {
    return super.data() +
           (group * (cols / kSuperBlockElements) + block / (kSuperBlockElements / kBlockElements)) *
               super_bytes();
  }
};

// Row r's scale and min of block j (0..7) in a Q4_K or Q5_K super-block entry.
inline void KScaleAndMin(const uint8_t* super, int j, int r, int* scale, int* min) {
  const int low = super[kKScalesOffset + 16 * j + r];
  const int top = super[kKScalesOffset + 128 + 16 * (j % 4) + r] >> (4 * (j / 4));
  *scale = (low & 0x0F) | (top & 3) << 4;
  *min = low >> 4 | (top >> 2 & 3) << 4;
}

// The code of element e (0..31) of row r (0..15) in a record of `format`: 0..15 for Q4_x and Q4_K,
// 0..31 for Q5_K, 0..63 for Q6_K, the signed q for Q8_0.
inline int PackedCode(BlockFormat format, const uint8_t* record, int r, int e) {
  if (format == BlockFormat::kQ8_0)
    return static_cast<int8_t>(record[64 * (e / 4) + 4 * r + e % 4]);
  if (format == BlockFormat::kQ6_K) {
    if (e < 16) return record[64 * (e / 4) + 4 * r + e % 4] & 0x3F;
    return PackedCode(BlockFormat::kQ4_0, record + 256, r, e - 16) |
           (record[64 * (e / 4 - 4) + 4 * r + e % 4] >> 6) << 4;
  }
  const int low = (record[64 * (e / 8) + 4 * r + e % 4] >> ((e / 4) % 2 * 4)) & 0x0F;
  if (format == BlockFormat::kQ5_K)
    return low | ((record[256 + 4 * r + e % 4] >> (e / 4)) & 1) << 4;
  return low;
}

// Rearranges `rows` rows of `cols` elements (cols a multiple of GgufBlockElements(format)) held
// as GGUF blocks of `format`, row-major, into the packed layout.
PackedWeight PackWeight(BlockFormat format, const uint8_t* blocks, int64_t rows, int64_t cols);

// The GGUF blocks again, rows × (cols / GgufBlockElements(format)) of them, row-major: PackWeight's
// inverse, for a device that decodes the file's own format (the CUDA upload).
std::vector<uint8_t> UnpackWeight(const PackedWeight& w);

// Decodes rows [first, first + count) to fp32 into out [count, cols], bit-exact with ggml's
// reference dequantize_row_* (and model/dequantize.h). Single-threaded.
void DequantizePackedRows(const PackedWeight& w, int64_t first, int64_t count, float* out);

}  // namespace tpserve::cpu
