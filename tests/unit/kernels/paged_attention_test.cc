#include "kernels/cpu/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/fp8_e4m3.h"
#include "tests/unit/kernels/random_vector.h"

namespace tpserve::cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(WriteKvCacheTest, StoresEachTokenAtItsSlotAndSkipsNegativeSlots) {
  const int64_t num_blocks = 4, block_size = 2, kv_heads = 2, head_dim = 3;
  const int64_t row = kv_heads * head_dim;
  // Token t holds 100 t + i in K and -(100 t + i) in V.
  std::vector<float> k(4 * row), v(4 * row);
  for (int64_t t = 0; t < 4; ++t) {
    for (int64_t i = 0; i < row; ++i) {
      k[t * row + i] = 100.0f * t + i;
      v[t * row + i] = -(100.0f * t + i);
    }
  }
  const std::vector<int64_t> slots = {
      7, 0, -1, 4};  // block 3 offset 1, block 0 offset 0, skip, block 2 offset 0
  std::vector<float> k_cache(num_blocks * block_size * row, kNaN);
  std::vector<float> v_cache(num_blocks * block_size * row, kNaN);
  WriteKvCache(k.data(), v.data(), slots.data(), 4, kv_heads, head_dim, k_cache.data(),
               v_cache.data());
  for (int64_t slot = 0; slot < num_blocks * block_size; ++slot) {
    const auto it = std::find(slots.begin(), slots.end(), slot);
    for (int64_t i = 0; i < row; ++i) {
      if (it == slots.end()) {
        EXPECT_TRUE(std::isnan(k_cache[slot * row + i])) << "slot " << slot << " was written";
        EXPECT_TRUE(std::isnan(v_cache[slot * row + i])) << "slot " << slot << " was written";
      } else {
        const int64_t t = it - slots.begin();
        EXPECT_EQ(k_cache[slot * row + i], 100.0f * t + i);
        EXPECT_EQ(v_cache[slot * row + i], -(100.0f * t + i));
      }
    }
  }
}

struct Sequence {
  int32_t context_len;  // cached tokens after this step
  int32_t q_len;        // tokens computed this step: the last q_len of the context
};

struct AttentionCase {
  int64_t group;  // query heads per KV head
  int64_t block_size;
  int64_t head_dim = 64;
  float q_magnitude = 1.0f;  // |q| elements up to this; large values test the stable softmax
  // 0: an fp32 cache. Else an FP8 E4M3 cache of value / the KV head's scale, and the reference
  // attends to the values it holds. The scales differ by head and between K and V
  // (KvScales), around fp8_scale.
  float fp8_scale = 0.0f;
  int64_t window = 0;  // sliding-window attention; 0 for the whole causal context
};

std::string CaseName(const AttentionCase& c) {
  return "group " + std::to_string(c.group) + ", block_size " + std::to_string(c.block_size) +
         ", head_dim " + std::to_string(c.head_dim) + (c.fp8_scale > 0 ? ", FP8" : "") +
         (c.window > 0 ? ", window " + std::to_string(c.window) : "");
}

void PrintTo(const AttentionCase& c, std::ostream* os) { *os << CaseName(c); }

// A mixed batch: prefill, decode, chunked prefill (context > q_len > 1), a one-token sequence,
// a decode at an exact block boundary, and a sequence with no tokens this step.
const std::vector<Sequence>& MixedBatch() {
  static const std::vector<Sequence> kBatch = {
      {37, 37}, {50, 1}, {40, 7}, {1, 1}, {16, 1}, {33, 0}, {21, 5},
  };
  return kBatch;
}

// The two KV heads' K scales and V scales of an FP8 case: each differs from the others, so a
// kernel that takes one head's (or K's for V's) scale misses the reference.
std::pair<std::vector<float>, std::vector<float>> KvScales(float base) {
  return {{base, 4 * base}, {2 * base, base / 2}};
}

// Runs PagedAttention on the MixedBatch with K/V scattered over non-sequential blocks and
// returns the largest |out - reference|, where the reference is softmax attention in double over
// contiguous, unpaged K/V.
double MaxErrorAgainstNaive(const AttentionCase& c) {
  const std::vector<Sequence>& seqs = MixedBatch();
  const int64_t num_seqs = seqs.size();
  const int64_t kv_heads = 2;
  const int64_t num_heads = kv_heads * c.group;
  const int64_t head_dim = c.head_dim;
  const int64_t bs = c.block_size;
  const int64_t row = kv_heads * head_dim;  // floats per token in K or V
  std::mt19937_64 rng(1234 + 10 * c.group + bs);

  // Block tables: scattered ids from a shuffled pool; sequence 2 (context 40) gets [5, 2, 7]
  // when block_size is 16. Unused entries stay -1 and must never be read.
  int64_t max_blocks = 0, needed = 0;
  for (const Sequence& s : seqs) {
    const int64_t blocks = (s.context_len + bs - 1) / bs;
    max_blocks = std::max(max_blocks, blocks + 1);
    needed += blocks;
  }
  const int64_t num_blocks = needed + 5;
  std::vector<int32_t> pool;
  for (int32_t b = 0; b < num_blocks; ++b) {
    if (bs != 16 || (b != 5 && b != 2 && b != 7)) pool.push_back(b);
  }
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int32_t> block_tables(num_seqs * max_blocks, -1);
  size_t next = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t blocks = (seqs[s].context_len + bs - 1) / bs;
    for (int64_t b = 0; b < blocks; ++b) {
      block_tables[s * max_blocks + b] =
          (bs == 16 && s == 2) ? std::vector<int32_t>{5, 2, 7}[b] : pool[next++];
    }
  }

  // Each sequence's whole K/V history [context_len, kv_heads, head_dim], written into the cache
  // (NaN everywhere else, so reading an unwritten slot poisons the output).
  std::vector<std::vector<float>> k_full(num_seqs), v_full(num_seqs);
  const bool fp8 = c.fp8_scale > 0;
  const auto [k_scales, v_scales] = KvScales(c.fp8_scale);
  std::vector<float> k_cache(fp8 ? 0 : num_blocks * bs * row, kNaN);
  std::vector<float> v_cache(fp8 ? 0 : num_blocks * bs * row, kNaN);
  constexpr uint8_t kNaNCode = 0x7F;
  std::vector<uint8_t> k_fp8(fp8 ? num_blocks * bs * row : 0, kNaNCode);
  std::vector<uint8_t> v_fp8(fp8 ? num_blocks * bs * row : 0, kNaNCode);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t ctx = seqs[s].context_len;
    k_full[s] = RandomVector(ctx * row, 1.0f, rng);
    v_full[s] = RandomVector(ctx * row, 1.0f, rng);
    std::vector<int64_t> slots(ctx);
    for (int64_t pos = 0; pos < ctx; ++pos) {
      slots[pos] = int64_t{block_tables[s * max_blocks + pos / bs]} * bs + pos % bs;
    }
    if (!fp8) {
      WriteKvCache(k_full[s].data(), v_full[s].data(), slots.data(), ctx, kv_heads, head_dim,
                   k_cache.data(), v_cache.data());
      continue;
    }
    WriteKvCacheFp8(k_full[s].data(), v_full[s].data(), slots.data(), ctx, kv_heads, head_dim,
                    k_scales.data(), v_scales.data(), k_fp8.data(), v_fp8.data());
    // The reference attends to what the cache holds, decoded as on paper.
    for (const auto& [full, scales] : {std::pair{&k_full[s], &k_scales}, {&v_full[s], &v_scales}}) {
      for (int64_t i = 0; i < ctx * row; ++i) {
        const float scale = (*scales)[i % row / head_dim];
        (*full)[i] = FromE4m3(ToE4m3((*full)[i] / scale)) * scale;
      }
    }
  }

  std::vector<int32_t> query_start = {0}, context_lens;
  for (const Sequence& s : seqs) {
    query_start.push_back(query_start.back() + s.q_len);
    context_lens.push_back(s.context_len);
  }
  const int64_t num_tokens = query_start.back();
  const std::vector<float> q = RandomVector(num_tokens * num_heads * head_dim, c.q_magnitude, rng);
  std::vector<float> out(num_tokens * num_heads * head_dim, kNaN);

  PagedAttentionParams p;
  p.q = q.data();
  if (fp8) {
    p.k_cache_fp8 = k_fp8.data();
    p.v_cache_fp8 = v_fp8.data();
    p.k_scales = k_scales.data();
    p.v_scales = v_scales.data();
  } else {
    p.k_cache = k_cache.data();
    p.v_cache = v_cache.data();
  }
  p.num_seqs = num_seqs;
  p.query_start = query_start.data();
  p.context_lens = context_lens.data();
  p.block_tables = block_tables.data();
  p.max_blocks_per_seq = max_blocks;
  p.num_heads = num_heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = bs;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.window = c.window;
  p.out = out.data();
  PagedAttention(p);

  double max_error = 0.0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t q_len = seqs[s].q_len;
    for (int64_t j = 0; j < q_len; ++j) {
      const int64_t token = query_start[s] + j;
      const int64_t position = seqs[s].context_len - q_len + j;
      for (int64_t h = 0; h < num_heads; ++h) {
        const int64_t g = h / c.group;
        const float* qh = q.data() + (token * num_heads + h) * head_dim;
        // The keys the query sees: all before it, or the last `window` of them.
        const int64_t first = c.window > 0 ? std::max<int64_t>(0, position + 1 - c.window) : 0;
        std::vector<double> scores(position + 1, -std::numeric_limits<double>::infinity());
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t pos = first; pos <= position; ++pos) {
          const float* kp = k_full[s].data() + pos * row + g * head_dim;
          double dot = 0;
          for (int64_t d = 0; d < head_dim; ++d) dot += double{qh[d]} * kp[d];
          scores[pos] = dot * p.scale;
          max_score = std::max(max_score, scores[pos]);
        }
        double sum = 0;
        for (double& sc : scores) sum += (sc = std::exp(sc - max_score));
        for (int64_t d = 0; d < head_dim; ++d) {
          double want = 0;
          for (int64_t pos = first; pos <= position; ++pos) {
            want += scores[pos] / sum * v_full[s][pos * row + g * head_dim + d];
          }
          const double got = out[(token * num_heads + h) * head_dim + d];
          if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
          max_error = std::max(max_error, std::abs(got - want));
        }
      }
    }
  }
  return max_error;
}

class PagedAttentionTest : public testing::TestWithParam<AttentionCase> {};

TEST_P(PagedAttentionTest, MatchesNaiveContiguousAttention) {
  EXPECT_LT(MaxErrorAgainstNaive(GetParam()), 1e-5) << CaseName(GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    GqaAndBlockSizes, PagedAttentionTest,
    testing::Values(AttentionCase{1, 16}, AttentionCase{3, 16}, AttentionCase{4, 16},
                    AttentionCase{1, 1}, AttentionCase{3, 1}, AttentionCase{4, 1},
                    AttentionCase{3, 5}, AttentionCase{3, 32}, AttentionCase{8, 16},
                    AttentionCase{2, 16, /*head_dim=*/128}, AttentionCase{1, 16, /*head_dim=*/12},
                    AttentionCase{4, 16, /*head_dim=*/256}, AttentionCase{2, 5, /*head_dim=*/256},
                    AttentionCase{1, 16, /*head_dim=*/96}, AttentionCase{3, 5, /*head_dim=*/96},
                    // Windows shorter than the contexts, starting inside blocks and on their
                    // edges, on both paths (head_dim 64: the vector one; 12: the portable one).
                    AttentionCase{3, 16, 64, 1.0f, 0.0f, /*window=*/7},
                    AttentionCase{2, 5, 64, 1.0f, 0.0f, /*window=*/10},
                    AttentionCase{4, 16, 128, 1.0f, 0.0f, /*window=*/1},
                    AttentionCase{1, 16, 12, 1.0f, 0.0f, /*window=*/9},
                    AttentionCase{2, 5, 64, 1.0f, /*fp8_scale=*/0.01f, /*window=*/6},
                    // FP8 caches: scales that put the values among normals and among subnormals,
                    // or past E4M3's largest (saturated), on the vector paths (64, 128) and the
                    // portable one (12).
                    AttentionCase{3, 16, 64, 1.0f, /*fp8_scale=*/0.01f},
                    AttentionCase{2, 16, 64, 1.0f, /*fp8_scale=*/0.001f},
                    AttentionCase{2, 16, 128, 1.0f, /*fp8_scale=*/1.0f},
                    AttentionCase{4, 16, 256, 1.0f, /*fp8_scale=*/0.01f},
                    AttentionCase{4, 5, 64, 1.0f, /*fp8_scale=*/0.5f},
                    AttentionCase{1, 16, 12, 1.0f, /*fp8_scale=*/0.01f}),
    [](const testing::TestParamInfo<AttentionCase>& info) {
      return "Group" + std::to_string(info.param.group) + "Block" +
             std::to_string(info.param.block_size) + "HeadDim" +
             std::to_string(info.param.head_dim) + (info.param.fp8_scale > 0 ? "Fp8" : "") +
             (info.param.window > 0 ? "Window" + std::to_string(info.param.window) : "");
    });

// Scores in the hundreds overflow a softmax that does not subtract the maximum. The tolerance is
// looser because fp32 rounding of a score grows with its size (~1e-4 absolute at |score| ~ 100).
TEST(PagedAttentionStabilityTest, LargeScoresStayFiniteAndAccurate) {
  for (int64_t block_size : {16, 1}) {
    AttentionCase c{3, block_size};
    c.q_magnitude = 100.0f;
    EXPECT_LT(MaxErrorAgainstNaive(c), 1e-3) << CaseName(c);
  }
}

TEST(PagedAttentionEdgeTest, SingleCachedTokenReturnsItsValue) {
  // One position: softmax of a single score is 1, so out = V exactly, whatever q is.
  const int64_t head_dim = 4;
  const std::vector<float> q = {100, -3, 7, 0.5f};
  const std::vector<float> k_cache = {1, 2, 3, 4};
  const std::vector<float> v_cache = {0.25f, -1, 8, 3};
  const int32_t query_start[] = {0, 1};
  const int32_t context_lens[] = {1};
  const int32_t block_tables[] = {0};
  std::vector<float> out(head_dim);
  PagedAttentionParams p;
  p.q = q.data();
  p.k_cache = k_cache.data();
  p.v_cache = v_cache.data();
  p.num_seqs = 1;
  p.query_start = query_start;
  p.context_lens = context_lens;
  p.block_tables = block_tables;
  p.max_blocks_per_seq = 1;
  p.num_heads = 1;
  p.num_kv_heads = 1;
  p.head_dim = head_dim;
  p.block_size = 1;
  p.scale = 0.5f;
  p.out = out.data();
  PagedAttention(p);
  EXPECT_EQ(out, v_cache);
}

}  // namespace
}  // namespace tpserve::cpu
