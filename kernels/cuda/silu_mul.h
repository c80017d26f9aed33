// The gated activation of the Llama MLP (bf16, CUDA). Mirrors kernels/cpu/silu_mul.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/bf16.h"

namespace tpserve::cuda {

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i], for i in [0, n), queued
// on `stream`; device pointers. fp32 math with IEEE expf and division (no fast-math
// intrinsics), one bf16 rounding per output.
//   gate, up, out: [n] (callers pass [num_tokens * intermediate_local]); out may be the same
//   pointer as gate or up.
void SiluMul(const bf16* gate, const bf16* up, int64_t n, bf16* out, cudaStream_t stream);

// The same where gate and up come from one product against the stacked [gate; up] weight:
// out[r, i] = silu(gate_up[r, i]) * gate_up[r, width + i] for gate_up [rows, 2 * width] and out
// [rows, width] (not overlapping). The same bits as SiluMul on the two halves.
void SiluMulRows(const bf16* gate_up, int64_t rows, int64_t width, bf16* out, cudaStream_t stream);

}  // namespace tpserve::cuda
