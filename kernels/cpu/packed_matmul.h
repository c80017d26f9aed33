// c = a · wᵀ against a PackedWeight (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K), CPU.
//
// Numerics, as llama.cpp's CPU backend: the activations are rounded to 8 bits per 32-element
// block (quantized_activations.h), each block's dot product with the weight codes is exact in
// integers, and per output the blocks are added in fp32 in order k = 0, 32, 64, ...:
//   acc = fma(float(isum), d_w * d_x, acc)        isum = Σ code · q_x  (Q4_0: Σ (code - 8) · q_x)
//   acc = fma(m_w, d_x * Σ q_x, acc)               Q4_1 only: the block minimum
// The K-quants scale each block's integer sum by its integer scale, still exact (|t| < 2^24), and
// apply the super-block's fp16 factors once per 8 blocks (scaled, mins start at 0 each time):
//   t = isum · s                                   Q4_K, Q5_K: s the block's 6-bit scale
//   t = Σ_h (Σ (code - 32) · q_x over half h) · s_h   Q6_K: an int8 scale per 16 elements
//   scaled = fma(float(t), d_x, scaled)
//   mins = fma(float(m), d_x * Σ q_x, mins)       Q4_K, Q5_K: m the block's 6-bit min
//   after the 8th block: acc = fma(d, scaled, acc); acc = fma(-dmin, mins, acc)  (Q6_K: no dmin)
// Every instruction set computes exactly these operations, so the result is the same bits on
// each, and an output does not depend on m or on which other rows share the call.
#pragma once

#include <cstdint>

#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/quantized_activations.h"

namespace tpserve::cpu {

// The instruction sets the product runs on, best last.
// kAmx: AMX tiles for 4 or more activation rows, AVX-512 VNNI for fewer.
enum class PackedIsa { kPortable, kAvx2, kAvx512Vnni, kAmx };
bool PackedIsaSupported(PackedIsa isa);  // by this CPU (AMX: and granted by the kernel)
PackedIsa BestPackedIsa();               // what PackedMatmulBT uses
const char* PackedIsaName(PackedIsa isa);

// How a product rounds its activations. k8: 8 bits per block, llama.cpp's rounding. k16: 16 bits
// per block as two 8-bit halves (QuantizeActivations16), whose products are added: the same
// operations as above on each half, then c = c_high + c_low in fp32, at twice the integer work.
enum class ActivationBits { k8, k16 };

// c[m, count] = a[m, w.cols] · w[first, first + count)ᵀ, row-major, c not read. Threads:
// ParallelFor, over groups of 16 weight rows.
void PackedMatmulBT(const float* a, int64_t m, const PackedWeight& w, int64_t first, int64_t count,
                    float* c, ActivationBits bits);

// The same on already quantized activations and a given instruction set (one PackedIsaSupported):
// what the tests compare.
void PackedMatmulBT(const QuantizedActivations& a, const PackedWeight& w, int64_t first,
                    int64_t count, float* c, PackedIsa isa);

}  // namespace tpserve::cpu
