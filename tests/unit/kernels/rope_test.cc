#include "kernels/cpu/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/unit/kernels/random_vector.h"

namespace tpserve::cpu {
namespace {

// The unscaled table: theta_base^(-2i / rope_dims), [rope_dims / 2].
std::vector<double> Frequencies(double base, int64_t rope_dims) {
  std::vector<double> inv_freq(rope_dims / 2);
  for (int64_t i = 0; i < rope_dims / 2; ++i) inv_freq[i] = std::pow(base, -2.0 * i / rope_dims);
  return inv_freq;
}

// ggml's "normal" mode, written as ggml does (theta multiplied by theta_scale per pair), but in
// double. x: [num_tokens, num_heads, head_dim].
std::vector<double> NaiveAdjacentPairs(const std::vector<float>& x,
                                       const std::vector<int32_t>& positions, int64_t num_heads,
                                       int64_t head_dim, int64_t rope_dims, double base) {
  std::vector<double> out(x.begin(), x.end());
  const double theta_scale = std::pow(base, -2.0 / rope_dims);
  for (size_t t = 0; t < positions.size(); ++t) {
    for (int64_t h = 0; h < num_heads; ++h) {
      double* o = out.data() + (t * num_heads + h) * head_dim;
      double theta = positions[t];
      for (int64_t i0 = 0; i0 < rope_dims; i0 += 2) {
        const double x0 = o[i0], x1 = o[i0 + 1];
        o[i0] = x0 * std::cos(theta) - x1 * std::sin(theta);
        o[i0 + 1] = x0 * std::sin(theta) + x1 * std::cos(theta);
        theta *= theta_scale;
      }
    }
  }
  return out;
}

// Hugging Face's apply_rotary_pos_emb, in double:
//   inv_freq = 1 / base^(arange(0, d, 2) / d);  emb = cat(pos * inv_freq, pos * inv_freq)
//   out = x * cos(emb) + rotate_half(x) * sin(emb),  rotate_half(x) = cat(-x[d/2:], x[:d/2])
// on the first rope_dims dims; the rest pass through.
std::vector<double> NaiveRotateHalf(const std::vector<float>& x,
                                    const std::vector<int32_t>& positions, int64_t num_heads,
                                    int64_t head_dim, int64_t rope_dims, double base) {
  std::vector<double> out(x.begin(), x.end());
  const int64_t half = rope_dims / 2;
  for (size_t t = 0; t < positions.size(); ++t) {
    std::vector<double> emb(rope_dims);
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq = 1.0 / std::pow(base, static_cast<double>(2 * i) / rope_dims);
      emb[i] = emb[i + half] = positions[t] * inv_freq;
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      const float* xh = x.data() + (t * num_heads + h) * head_dim;
      double* o = out.data() + (t * num_heads + h) * head_dim;
      for (int64_t d = 0; d < rope_dims; ++d) {
        const double rotated = d < half ? -double{xh[d + half]} : double{xh[d - half]};
        o[d] = xh[d] * std::cos(emb[d]) + rotated * std::sin(emb[d]);
      }
    }
  }
  return out;
}

// y[.., i] = x[.., 2i], y[.., rope_dims/2 + i] = x[.., 2i + 1] for i < rope_dims / 2; the rest
// is copied. This is the row permutation llama.cpp's converter undoes between HF and GGUF.
std::vector<float> EvensThenOdds(const std::vector<float>& x, int64_t head_dim, int64_t rope_dims) {
  std::vector<float> y(x.size());
  const int64_t half = rope_dims / 2;
  for (size_t row = 0; row < x.size() / head_dim; ++row) {
    const float* xr = x.data() + row * head_dim;
    float* yr = y.data() + row * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      yr[i] = xr[2 * i];
      yr[half + i] = xr[2 * i + 1];
    }
    for (int64_t d = rope_dims; d < head_dim; ++d) yr[d] = xr[d];
  }
  return y;
}

// Position 1, head_dim 4, base 10000: pair 0 turns by 1 rad, pair 1 by 10000^(-1/2) = 0.01 rad.
TEST(RopeTest, HandComputedAdjacentPairs) {
  std::vector<float> x = {1, 2, 3, 4};
  const int32_t position = 1;
  ApplyRope(x.data(), &position, 1, 1, 4, 4, Frequencies(10000, 4).data(),
            RopeStyle::kAdjacentPairs);
  // (1, 2) by 1 rad; (3, 4) by 0.01 rad.
  EXPECT_NEAR(x[0], -1.1426396637476532, 1e-6);  // 1 cos 1 - 2 sin 1
  EXPECT_NEAR(x[1], 1.922075596544176, 1e-6);    // 1 sin 1 + 2 cos 1
  EXPECT_NEAR(x[2], 2.9598506679133294, 1e-6);   // 3 cos .01 - 4 sin .01
  EXPECT_NEAR(x[3], 4.029799501669161, 1e-6);    // 3 sin .01 + 4 cos .01
}

TEST(RopeTest, HandComputedRotateHalf) {
  std::vector<float> x = {1, 2, 3, 4};
  const int32_t position = 1;
  ApplyRope(x.data(), &position, 1, 1, 4, 4, Frequencies(10000, 4).data(), RopeStyle::kRotateHalf);
  // (x0, x2) = (1, 3) by 1 rad; (x1, x3) = (2, 4) by 0.01 rad.
  EXPECT_NEAR(x[0], -1.9841106485555495, 1e-6);  // 1 cos 1 - 3 sin 1
  EXPECT_NEAR(x[1], 1.959900667496664, 1e-6);    // 2 cos .01 - 4 sin .01
  EXPECT_NEAR(x[2], 2.4623779024123156, 1e-6);   // 1 sin 1 + 3 cos 1
  EXPECT_NEAR(x[3], 4.019799668334994, 1e-6);    // 2 sin .01 + 4 cos .01
}

TEST(RopeTest, PositionZeroIsIdentity) {
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
    const std::vector<float> x = RandomVector(3 * 64, 1.0f, 1);
    std::vector<float> y = x;
    const int32_t position = 0;
    ApplyRope(y.data(), &position, 1, 3, 64, 64, Frequencies(10000, 64).data(), style);
    EXPECT_EQ(y, x);
  }
}

struct RopeCase {
  int64_t head_dim;
  int64_t rope_dims;
  float base;
};

TEST(RopeTest, MatchesNaiveReferences) {
  const RopeCase cases[] = {
      {64, 64, 10000.0f}, {128, 128, 500000.0f}, {64, 32, 10000.0f}, {6, 2, 100.0f}};
  const std::vector<int32_t> positions = {0, 1, 2, 17, 1000, 8191, 32767};
  const int64_t num_heads = 3;
  for (const RopeCase& c : cases) {
    for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
      const std::vector<float> x =
          RandomVector(positions.size() * num_heads * c.head_dim, 1.0f, c.head_dim);
      std::vector<float> y = x;
      ApplyRope(y.data(), positions.data(), positions.size(), num_heads, c.head_dim, c.rope_dims,
                Frequencies(c.base, c.rope_dims).data(), style);
      const std::vector<double> want =
          style == RopeStyle::kAdjacentPairs
              ? NaiveAdjacentPairs(x, positions, num_heads, c.head_dim, c.rope_dims, c.base)
              : NaiveRotateHalf(x, positions, num_heads, c.head_dim, c.rope_dims, c.base);
      for (size_t i = 0; i < y.size(); ++i) {
        const int64_t d = i % c.head_dim;
        if (d >= c.rope_dims) {
          ASSERT_EQ(y[i], x[i]) << "dim " << d << " beyond rope_dims must be untouched";
        } else {
          ASSERT_NEAR(y[i], want[i], 2e-6)
              << "head_dim " << c.head_dim << " rope_dims " << c.rope_dims << " style "
              << static_cast<int>(style) << " index " << i;
        }
      }
    }
  }
}

// Permuting each head to (evens, odds) turns adjacent-pair RoPE into rotate-half RoPE:
// EvensThenOdds(Rope_adjacent(x)) == Rope_half(EvensThenOdds(x)), bit for bit.
TEST(RopeTest, EvensThenOddsTurnsAdjacentPairsIntoRotateHalf) {
  const std::vector<int32_t> positions = {0, 3, 99, 4096};
  for (const RopeCase& c : {RopeCase{64, 64, 10000.0f}, RopeCase{64, 48, 500000.0f}}) {
    const int64_t num_heads = 2;
    const std::vector<float> x = RandomVector(positions.size() * num_heads * c.head_dim, 1.0f, 9);
    std::vector<float> adjacent = x;
    ApplyRope(adjacent.data(), positions.data(), positions.size(), num_heads, c.head_dim,
              c.rope_dims, Frequencies(c.base, c.rope_dims).data(), RopeStyle::kAdjacentPairs);
    std::vector<float> half = EvensThenOdds(x, c.head_dim, c.rope_dims);
    ApplyRope(half.data(), positions.data(), positions.size(), num_heads, c.head_dim, c.rope_dims,
              Frequencies(c.base, c.rope_dims).data(), RopeStyle::kRotateHalf);
    EXPECT_EQ(EvensThenOdds(adjacent, c.head_dim, c.rope_dims), half)
        << "rope_dims " << c.rope_dims;
  }
}

// A scaled table (here: pair 0 as is, pair 1 at a quarter of its frequency, as llama3 scaling
// divides the low frequencies) is used as given: pair i turns by position × inv_freq[i].
TEST(RopeTest, RotatesByTheGivenTable) {
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
    std::vector<float> x = {1, 2, 3, 4};
    const int32_t position = 3;
    const std::vector<double> inv_freq = {0.5, 0.01 / 4};
    ApplyRope(x.data(), &position, 1, 1, 4, 4, inv_freq.data(), style);
    const bool adjacent = style == RopeStyle::kAdjacentPairs;
    // Pair 0 is (x0, x1) adjacent, (x0, x2) rotate-half; it turns by 1.5 rad, pair 1 by 0.0075.
    const int64_t p0b = adjacent ? 1 : 2, p1a = adjacent ? 2 : 1;
    const double a0 = 1.0, b0 = adjacent ? 2.0 : 3.0, a1 = adjacent ? 3.0 : 2.0, b1 = 4.0;
    EXPECT_NEAR(x[0], a0 * std::cos(1.5) - b0 * std::sin(1.5), 1e-6);
    EXPECT_NEAR(x[p0b], a0 * std::sin(1.5) + b0 * std::cos(1.5), 1e-6);
    EXPECT_NEAR(x[p1a], a1 * std::cos(0.0075) - b1 * std::sin(0.0075), 1e-6);
    EXPECT_NEAR(x[3], a1 * std::sin(0.0075) + b1 * std::cos(0.0075), 1e-6);
  }
}

// The point of RoPE: q(m) . k(n) depends only on m - n.
TEST(RopeTest, DotProductDependsOnlyOnRelativePosition) {
  const int64_t head_dim = 64;
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
    const std::vector<float> q = RandomVector(head_dim, 1.0f, 21);
    const std::vector<float> k = RandomVector(head_dim, 1.0f, 22);
    auto rotated_dot = [&](int32_t m, int32_t n) {
      std::vector<float> qm = q, kn = k;
      const std::vector<double> inv_freq = Frequencies(10000, head_dim);
      ApplyRope(qm.data(), &m, 1, 1, head_dim, head_dim, inv_freq.data(), style);
      ApplyRope(kn.data(), &n, 1, 1, head_dim, head_dim, inv_freq.data(), style);
      double dot = 0;
      for (int64_t d = 0; d < head_dim; ++d) dot += double{qm[d]} * kn[d];
      return dot;
    };
    const double base = rotated_dot(7, 3);
    EXPECT_NEAR(rotated_dot(4, 0), base, 1e-5);
    EXPECT_NEAR(rotated_dot(1007, 1003), base, 1e-5);
    EXPECT_GT(std::abs(rotated_dot(3, 7) - base), 1e-3);  // not symmetric: sign of m - n counts
  }
}

}  // namespace
}  // namespace tpserve::cpu
