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

int64_t ScaleCount(BlockFormat format) { return format == BlockFormat::kQ4_1 ? 2 : 1; }

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

template <BlockFormat kFormat>
void PackRows(const uint8_t* blocks, PackedWeight* w) {
  const int64_t block_bytes = BlockBytes(kFormat);
  const int64_t record_bytes = w->record_bytes();
  const int64_t code_bytes = w->code_bytes();
  // Load time of a large model: threads take rows; every byte of a record belongs to one row.
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

}  // namespace

int64_t BlockBytes(BlockFormat format) {
  switch (format) {
    case BlockFormat::kQ4_0: return 18;
    case BlockFormat::kQ4_1: return 20;
    case BlockFormat::kQ8_0: return 34;
  }
  TP_CHECK(false);
  return 0;
}

int64_t PackedWeight::code_bytes() const { return format == BlockFormat::kQ8_0 ? 512 : 256; }

int64_t PackedWeight::record_bytes() const {
  return code_bytes() + ScaleCount(format) * kGroupRows * 2;
}

PackedWeight PackWeight(BlockFormat format, const uint8_t* blocks, int64_t rows, int64_t cols) {
  TP_CHECK(rows >= 0 && cols >= 0 && cols % kBlockElements == 0);
  PackedWeight w;
  w.format = format;
  w.rows = rows;
  w.cols = cols;
  w.data.assign(w.groups() * w.blocks() * w.record_bytes(), 0);
  switch (format) {
    case BlockFormat::kQ4_0: PackRows<BlockFormat::kQ4_0>(blocks, &w); break;
    case BlockFormat::kQ4_1: PackRows<BlockFormat::kQ4_1>(blocks, &w); break;
    case BlockFormat::kQ8_0: PackRows<BlockFormat::kQ8_0>(blocks, &w); break;
  }
  return w;
}

std::vector<uint8_t> UnpackWeight(const PackedWeight& w) {
  const int64_t block_bytes = BlockBytes(w.format);
  std::vector<uint8_t> blocks(w.rows * w.blocks() * block_bytes, 0);
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
      const float d = HalfToFloat(LoadU16(scales + 2 * r));
      float* dst = out + (row - first) * w.cols + b * kBlockElements;
      for (int e = 0; e < kBlockElements; ++e) {
        const int code = PackedCode(w.format, record, r, e);
        switch (w.format) {
          case BlockFormat::kQ4_0:
            dst[e] = static_cast<float>(code - 8) * d;
            break;
          case BlockFormat::kQ4_1:
            dst[e] = static_cast<float>(code) * d +
                     HalfToFloat(LoadU16(scales + 2 * (kGroupRows + r)));
            break;
          case BlockFormat::kQ8_0:
            dst[e] = static_cast<float>(code) * d;
            break;
        }
      }
    }
  }
}

}  // namespace tpserve::cpu
