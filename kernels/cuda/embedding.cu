#include "kernels/cuda/embedding.h"

#include <algorithm>
#include <cstdio>

#include "common/check.h"
#include "kernels/cuda/launch_check.h"

namespace tpserve::cuda {
namespace {

// One block per output row. Pack = Bf16Pack moves 16 bytes at a time (hidden % 8 == 0, aligned
// pointers); Pack = bf16 is the general case.
template <typename Pack>
__global__ void EmbeddingKernel(const Pack* __restrict__ table, int64_t vocab,
                                int64_t packs_per_row, const int32_t* __restrict__ ids,
                                Pack* __restrict__ out) {
  const int64_t row = blockIdx.x;
  const int32_t id = ids[row];
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0) {
      printf("tpserve::cuda::Embedding: token id %d at row %lld out of range [0, %lld)\n", id,
             static_cast<long long>(row), static_cast<long long>(vocab));
    }
    __trap();
  }
  const Pack* src = table + id * packs_per_row;
  Pack* dst = out + row * packs_per_row;
  for (int64_t i = threadIdx.x; i < packs_per_row; i += blockDim.x) dst[i] = src[i];
}

__global__ void ScaleKernel(bf16* x, int64_t count, float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    x[i] = ToBf16(ToFloat(x[i]) * scale);
  }
}

int ThreadsFor(int64_t items) {
  // A multiple of the warp size, at most 256: rows are short (hidden <= 8192 -> 1024 packs), so
  // one block per row keeps every thread busy with a few 16-byte moves.
  const int64_t warps = (items + 31) / 32;
  return static_cast<int>(32 * std::min<int64_t>(std::max<int64_t>(warps, 1), 8));
}

}  // namespace

void Embedding(const bf16* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n,
               bf16* out, cudaStream_t stream) {
  TP_CHECK(vocab > 0 && hidden > 0 && n >= 0);
  TP_CHECK(n <= int64_t{0x7FFFFFFF});  // one block per row: the grid's x limit
  if (n == 0) return;
  if (hidden % kPackBf16 == 0 && IsPackAligned(table) && IsPackAligned(out)) {
    const int64_t packs = hidden / kPackBf16;
    EmbeddingKernel<<<static_cast<unsigned>(n), ThreadsFor(packs), 0, stream>>>(
        reinterpret_cast<const Bf16Pack*>(table), vocab, packs, ids,
        reinterpret_cast<Bf16Pack*>(out));
  } else {
    EmbeddingKernel<<<static_cast<unsigned>(n), ThreadsFor(hidden), 0, stream>>>(table, vocab,
                                                                                 hidden, ids, out);
  }
  TP_CUDA_CHECK_LAUNCH();
}

void ScaleInPlace(bf16* x, int64_t count, float scale, cudaStream_t stream) {
  TP_CHECK(count >= 0);
  if (count == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 4096));
  ScaleKernel<<<blocks, 256, 0, stream>>>(x, count, scale);
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
