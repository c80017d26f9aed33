// Activations rounded to 8 bits per 32-element block before a product with packed weights, as
// llama.cpp's CPU backend rounds them: the integer block dot products that follow are exact, and
// one fp32 scale per block and row turns them back into floats.
#pragma once

#include <cstdint>
#include <vector>

namespace tpserve::cpu {

// `rows` rows of k activations, x ≈ d * q within each 32-element block.
struct QuantizedActivations {
  int64_t rows = 0;
  int64_t k = 0;                // a multiple of 32
  std::vector<int8_t> q;        // [rows, k] round-half-even(x * (127 / max|x|)) of its block
  std::vector<float> d;         // [rows, k / 32] max|x| / 127 (0 when the block is all zero)
  std::vector<int32_t> sum;     // [rows, k / 32] the sum of the block's q
  std::vector<int32_t> sum_lo;  // [rows, k / 32] the sum of its first 16 q (Q6_K's half blocks)
  std::vector<float> d_sum;     // [rows, k / 32] d * sum: what a per-block weight offset multiplies

  int64_t blocks() const { return k / 32; }
};

// x: [rows, k] fp32, k a multiple of 32. Reuses `out`'s buffers. Threads: ParallelFor, over rows.
// Every instruction set gives the same bits (the vector path rounds like the scalar one).
void QuantizeActivations(const float* x, int64_t rows, int64_t k, QuantizedActivations* out);

// The portable path alone, which the vector path must equal.
void QuantizeActivationsScalar(const float* x, int64_t rows, int64_t k, QuantizedActivations* out);

// 16 bits per block as two 8-bit rows, so the same integer products serve: per block,
// q16 = round-half-even(x * (32512 / max|x|)), then h = (q16 + 128) >> 8 (floor) and
// l = q16 - 256 h, which keeps h in [-127, 127] and l in [-128, 127]. Row 2i holds row i's h with
// d = 256 * max|x| / 32512, row 2i + 1 its l with d = max|x| / 32512: a product with each, added,
// is the product with x rounded to 1 part in 65024 of its block's largest value instead of 254,
// at twice the integer work. 32512 = 127 * 256 is the largest scale whose h stays a signed byte.
// x: [rows, k] fp32, k a multiple of 32; out gets 2 * rows rows.
void QuantizeActivations16(const float* x, int64_t rows, int64_t k, QuantizedActivations* out);

}  // namespace tpserve::cpu
