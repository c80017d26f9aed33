// Matrix product against a weight kept in GGUF block format (Q4_0, Q4_1, Q8_0), CPU.
//
// Numerics: the weights are decoded with exactly the float operations of ggml's reference
// dequantize_row_* (and of model/dequantize.h), activations stay fp32 (no activation
// quantization), and products are summed in fp32. The result equals dequantize-then-MatmulBT up
// to fp32 summation order.
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// The block formats of ggml-common.h that this kernel reads; every block holds 32 elements.
//   Q4_0: fp16 d, qs[16]           (18 bytes)  w = ((q & 0xF) - 8) * d
//   Q4_1: fp16 d, fp16 m, qs[16]   (20 bytes)  w = (q & 0xF) * d + m
//   Q8_0: fp16 d, int8 qs[32]      (34 bytes)  w = q * d
// In Q4_x, element j < 16 is the low nibble of qs[j] and element j + 16 its high nibble.
enum class BlockFormat { kQ4_0, kQ4_1, kQ8_0 };

inline constexpr int64_t kBlockElements = 32;

// Bytes of one 32-element block of `format`.
int64_t BlockBytes(BlockFormat format);

// Up to this many rows of `a`, QuantizedMatmulBT reads the blocks directly (a GEMV per row of
// `b`, bandwidth-bound: decode); above it, it decodes tiles of `b` to fp32 and runs SGEMM
// (compute-bound: prefill). Measured on one layer of SmolLM2-135M Q4_1, one thread (AVX2): GEMV
// 0.56 ms at m = 1 and 2.4 ms at m = 8 against 2.7 / 3.4 ms for decode-then-SGEMM.
inline constexpr int64_t kQuantizedGemvMaxRows = 8;

// c = a * b^T
//   a: [m, k]  row-major fp32 activations
//   b: [n, k]  row-major weight in blocks of `format`: n rows of k / 32 blocks each
//   c: [m, n]  row-major fp32; not read, must not overlap a or b.
// k must be a multiple of 32; m, n, k must fit in a 32-bit int; zero sizes are allowed.
// Threads: the OpenMP pool (rows of b are split between threads); SGEMM uses OpenBLAS's.
void QuantizedMatmulBT(const float* a, BlockFormat format, const uint8_t* b, int64_t m, int64_t n,
                       int64_t k, float* c);

// Decodes `rows` rows of k elements (k a multiple of 32) of `format` into out [rows, k], bit-exact
// with model/dequantize.h. Single-threaded.
void DequantizeBlockRows(BlockFormat format, const uint8_t* blocks, int64_t rows, int64_t k,
                         float* out);

}  // namespace tpserve::cpu
