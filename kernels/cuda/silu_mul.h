// The gated activations of the MLP (bf16, CUDA): Llama's SiLU, Gemma's GELU. Mirror
// kernels/cpu/silu_mul.h and gelu_tanh_mul.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/bf16.h"

namespace tpserve::cuda {

// The gated activation over the rows of the gate_up product (one product against the stacked
// [gate; up] weight): out[r, i] = silu(g) * u = g / (1 + exp(-g)) * u with g = gate_up[r, i] and
// u = gate_up[r, width + i], for gate_up [rows, 2 * width] and out [rows, width] (not
// overlapping), queued on `stream`; device pointers. fp32 math with IEEE expf and division (no
// fast-math intrinsics), one bf16 rounding per output.
void SiluMulRows(const bf16* gate_up, int64_t rows, int64_t width, bf16* out, cudaStream_t stream);

// The same with Gemma's gate, GELU's tanh approximation (kernels/cpu/gelu_tanh_mul.h):
// out[r, i] = 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))) * u, tanhf in fp32.
void GeluTanhMulRows(const bf16* gate_up, int64_t rows, int64_t width, bf16* out,
                     cudaStream_t stream);

}  // namespace tpserve::cuda
