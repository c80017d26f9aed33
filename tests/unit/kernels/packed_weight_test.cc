#include "kernels/cpu/packed_weight.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "model/ggml_type.h"
#include "tests/unit/kernels/quant_test_blocks.h"

namespace tpserve::cpu {
namespace {

TEST(PackedWeightTest, BlockBytesMatchGguf) {
  for (const Format& f : kFormats) {
    EXPECT_EQ(BlockBytes(f.format), GetGgmlTypeTraits(static_cast<uint32_t>(f.ggml))->block_bytes)
        << f.name;
  }
}

// The layout keeps the GGUF bytes: codes and scales of 16 rows per record, nothing else; Q4_K and
// Q5_K spend 16 bytes on the 12 of their packed 6-bit scales and mins.
TEST(PackedWeightTest, SameBytesAsTheBlocksForWholeGroups) {
  for (const Format& f : kFormats) {
    const int64_t k = Cols(f, 64);
    const std::vector<uint8_t> blocks = RandomBlocks(f.format, 32, k, 3);
    const PackedWeight w = PackWeight(f.format, blocks.data(), 32, k);
    EXPECT_EQ(w.data.size() + w.super.size(), blocks.size()) << f.name;
  }
}

TEST(PackedWeightTest, UnpackGivesTheBlocksBack) {
  for (const Format& f : kFormats) {
    for (const int64_t n : {1, 16, 37}) {
      const int64_t k = Cols(f, 64);
      const std::vector<uint8_t> blocks = RandomBlocks(f.format, n, k, 30 + n);
      EXPECT_EQ(UnpackWeight(PackWeight(f.format, blocks.data(), n, k)), blocks)
          << f.name << " n=" << n;
    }
  }
}

// Every row of a group that is not full (n = 9, 37), every element, decoded from the packed
// layout, bit for bit as model/dequantize.h decodes the original blocks.
TEST(PackedWeightTest, DecodeIsBitExactWithModelDecoder) {
  for (const Format& f : kFormats) {
    for (const int64_t n : {1, 9, 37}) {
      const int64_t k = Cols(f, 96);
      const std::vector<uint8_t> blocks = RandomBlocks(f.format, n, k, 7 + n, /*edge=*/true);
      const std::vector<float> want = DecodeBlocks(f, blocks, n, k);
      const PackedWeight w = PackWeight(f.format, blocks.data(), n, k);
      ASSERT_EQ(w.groups(), (n + 15) / 16);
      std::vector<float> got(n * k);
      DequantizePackedRows(w, 0, n, got.data());
      for (int64_t i = 0; i < n * k; ++i) {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
            << f.name << " n=" << n << " element " << i << ": " << got[i] << " vs " << want[i];
      }
      std::vector<float> one(k);
      DequantizePackedRows(w, n - 1, 1, one.data());
      EXPECT_EQ(std::memcmp(one.data(), want.data() + (n - 1) * k, k * sizeof(float)), 0);
    }
  }
}

}  // namespace
}  // namespace tpserve::cpu
