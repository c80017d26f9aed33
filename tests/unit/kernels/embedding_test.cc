#include "kernels/cpu/embedding.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace tpserve::cpu {
namespace {

// table[v, d] = 1000 * v + d: every copied value names its source.
std::vector<float> IndexTable(int64_t vocab, int64_t hidden) {
  std::vector<float> table(vocab * hidden);
  for (int64_t v = 0; v < vocab; ++v) {
    for (int64_t d = 0; d < hidden; ++d) table[v * hidden + d] = 1000.0f * v + d;
  }
  return table;
}

TEST(EmbeddingTest, CopiesTheRowOfEachId) {
  const int64_t vocab = 11, hidden = 5;
  const std::vector<float> table = IndexTable(vocab, hidden);
  const std::vector<int32_t> ids = {3, 0, 10, 3, 7};  // repeats and both ends of the vocabulary
  std::vector<float> out(ids.size() * hidden, -1.0f);
  Embedding(table.data(), vocab, hidden, ids.data(), ids.size(), out.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t d = 0; d < hidden; ++d) {
      EXPECT_EQ(out[i * hidden + d], 1000.0f * ids[i] + d) << "token " << i << " dim " << d;
    }
  }
}

TEST(EmbeddingTest, NoTokensWritesNothing) {
  const std::vector<float> table = IndexTable(4, 3);
  float sentinel = 42.0f;
  Embedding(table.data(), 4, 3, nullptr, 0, &sentinel);
  EXPECT_EQ(sentinel, 42.0f);
}

TEST(EmbeddingDeathTest, IdOutOfRangeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<float> table = IndexTable(4, 3);
  std::vector<float> out(3);
  const int32_t too_big = 4;
  const int32_t negative = -1;
  EXPECT_DEATH(Embedding(table.data(), 4, 3, &too_big, 1, out.data()), "token id out of range");
  EXPECT_DEATH(Embedding(table.data(), 4, 3, &negative, 1, out.data()), "token id out of range");
}

}  // namespace
}  // namespace tpserve::cpu
