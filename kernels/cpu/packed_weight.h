// A linear weight in a GGUF block format (Q4_0, Q4_1, Q8_0), rearranged once at load so that the
// integer products of packed_matmul.h read sixteen weight rows as one vector.
//
// Rows are taken in groups of 16 (the last group padded with zero rows). For each group and each
// 32-element block there is one record, records ordered block after block within a group, group
// after group:
//   codes  Q4_x: 4 chunks of 64 bytes. In chunk p, byte 4r + e holds in its low nibble the code of
//                element 8p + e of row r, in its high nibble that of element 8p + 4 + e.
//          Q8_0: 8 chunks of 64 bytes. In chunk g, byte 4r + e is q of element 4g + e of row r.
//   d      16 fp16: each row's block scale
//   m      16 fp16: each row's block minimum (Q4_1 only)
// Unpacked, the codes are 8 rows of 16 x 4 bytes: the operand of one vpdpbusd per 4 elements
// against a broadcast activation dword, and exactly AMX's B tile for K = 32. Same bytes as the
// GGUF blocks, rearranged: no extra memory but the padding rows.
#pragma once

#include <cstdint>
#include <vector>

namespace tpserve::cpu {

// The block formats of ggml-common.h read here; every block holds 32 elements.
//   Q4_0: fp16 d, qs[16]           (18 bytes)  w = ((q & 0xF) - 8) * d
//   Q4_1: fp16 d, fp16 m, qs[16]   (20 bytes)  w = (q & 0xF) * d + m
//   Q8_0: fp16 d, int8 qs[32]      (34 bytes)  w = q * d
// In Q4_x, element j < 16 is the low nibble of qs[j] and element j + 16 its high nibble.
enum class BlockFormat { kQ4_0, kQ4_1, kQ8_0 };

inline constexpr int64_t kBlockElements = 32;
inline constexpr int64_t kGroupRows = 16;

// Bytes of one 32-element GGUF block of `format`.
int64_t BlockBytes(BlockFormat format);

struct PackedWeight {
  BlockFormat format = BlockFormat::kQ8_0;
  int64_t rows = 0;
  int64_t cols = 0;  // a multiple of 32
  std::vector<uint8_t> data;

  int64_t blocks() const { return cols / kBlockElements; }
  int64_t groups() const { return (rows + kGroupRows - 1) / kGroupRows; }
  // Bytes of one (group, block) record, and of its codes (the scales follow them).
  int64_t record_bytes() const;
  int64_t code_bytes() const;
  const uint8_t* record(int64_t group, int64_t block) const {
    return data.data() + (group * blocks() + block) * record_bytes();
  }
};

// The code of element e (0..31) of row r (0..15) in a record of `format`: 0..15 for Q4_x, the
// signed q for Q8_0.
inline int PackedCode(BlockFormat format, const uint8_t* record, int r, int e) {
  if (format == BlockFormat::kQ8_0) return static_cast<int8_t>(record[64 * (e / 4) + 4 * r + e % 4]);
  return (record[64 * (e / 8) + 4 * r + e % 4] >> ((e / 4) % 2 * 4)) & 0x0F;
}

// Rearranges `rows` rows of `cols` elements (cols a multiple of 32) held as GGUF blocks of
// `format`, row-major, into the packed layout.
PackedWeight PackWeight(BlockFormat format, const uint8_t* blocks, int64_t rows, int64_t cols);

// The GGUF blocks again, rows × (cols / 32) of them, row-major: PackWeight's inverse, for a
// device that decodes the file's own format (the CUDA upload).
std::vector<uint8_t> UnpackWeight(const PackedWeight& w);

// Decodes rows [first, first + count) to fp32 into out [count, cols], bit-exact with ggml's
// reference dequantize_row_* (and model/dequantize.h). Single-threaded.
void DequantizePackedRows(const PackedWeight& w, int64_t first, int64_t count, float* out);

}  // namespace tpserve::cpu
