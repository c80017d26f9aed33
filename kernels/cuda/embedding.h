// Token embedding lookup (bf16, CUDA). Mirrors kernels/cpu/embedding.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/bf16.h"

namespace tpserve::cuda {

// out[i, :] = table[ids[i], :] for i in [0, n), queued on `stream`. All pointers are device
// memory. Exact: values are copied, not converted.
//   table: [vocab, hidden]
//   ids:   [n]; every id must lie in [0, vocab). The caller validates client input first, so an
//          id out of range is a bug: the kernel traps (the launch's stream reports
//          cudaErrorLaunchFailure, the context is lost) rather than read outside the table.
//   out:   [n, hidden]; must not overlap table.
void Embedding(const bf16* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n,
               bf16* out, cudaStream_t stream);

// x[i] = bf16(float(x[i]) * scale) for i in [0, count), queued on `stream`: Gemma's embedding
// times sqrt(hidden), as the CPU model scales its fp32 rows.
void ScaleInPlace(bf16* x, int64_t count, float scale, cudaStream_t stream);

}  // namespace tpserve::cuda
