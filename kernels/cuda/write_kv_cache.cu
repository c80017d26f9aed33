#include <cuda_fp8.h>

#include <algorithm>

#include "common/check.h"
#include "kernels/cuda/launch_check.h"
#include "kernels/cuda/write_kv_cache.h"

namespace tpserve::cuda {
namespace {

int ThreadsFor(int64_t items) {
  // A multiple of the warp size, at most 256: a row is num_kv_heads * head_dim values (a few
  // hundred packs at most on one rank).
  return static_cast<int>(std::clamp<int64_t>((items + 31) / 32 * 32, 32, 256));
}

// One block per token; its K and V rows (num_kv_heads * head_dim values, contiguous in both the
// input and the pool) are copied as `vecs` vectors of kWidth bf16.
template <int kWidth>
__global__ void WriteKvCacheKernel(const Bf16Vec<kWidth>* __restrict__ k,
                                   const Bf16Vec<kWidth>* __restrict__ v,
                                   const int64_t* __restrict__ slot_mapping, int64_t vecs,
                                   Bf16Vec<kWidth>* __restrict__ k_cache,
                                   Bf16Vec<kWidth>* __restrict__ v_cache) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;
  const int64_t src = token * vecs;
  const int64_t dst = slot * vecs;
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
    k_cache[dst + i] = k[src + i];
    v_cache[dst + i] = v[src + i];
  }
}

template <int kWidth>
void Launch(const bf16* k, const bf16* v, const int64_t* slot_mapping, int64_t num_tokens,
            int64_t vecs, bf16* k_cache, bf16* v_cache, cudaStream_t stream) {
  using Vec = Bf16Vec<kWidth>;
  WriteKvCacheKernel<kWidth><<<static_cast<unsigned>(num_tokens), ThreadsFor(vecs), 0, stream>>>(
      reinterpret_cast<const Vec*>(k), reinterpret_cast<const Vec*>(v), slot_mapping, vecs,
      reinterpret_cast<Vec*>(k_cache), reinterpret_cast<Vec*>(v_cache));
}

// One block per token, one value per thread and iteration. Multiplying by the inverse computed
// on the host, as cpu::QuantizeE4m3 does, keeps the codes its codes.
__global__ void WriteKvCacheFp8Kernel(const bf16* __restrict__ k, const bf16* __restrict__ v,
                                      const int64_t* __restrict__ slot_mapping, int64_t row,
                                      float inverse, uint8_t* __restrict__ k_cache,
                                      uint8_t* __restrict__ v_cache) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;
  const int64_t src = token * row;
  const int64_t dst = slot * row;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    k_cache[dst + i] =
        __nv_cvt_float_to_fp8(ToFloat(k[src + i]) * inverse, __NV_SATFINITE, __NV_E4M3);
    v_cache[dst + i] =
        __nv_cvt_float_to_fp8(ToFloat(v[src + i]) * inverse, __NV_SATFINITE, __NV_E4M3);
  }
}

}  // namespace

void WriteKvCacheFp8(const bf16* k, const bf16* v, const int64_t* slot_mapping, int64_t num_tokens,
                     int64_t num_kv_heads, int64_t head_dim, float scale, uint8_t* k_cache,
                     uint8_t* v_cache, cudaStream_t stream) {
  TP_CHECK(num_tokens >= 0 && num_kv_heads > 0 && head_dim > 0 && scale > 0.0f);
  TP_CHECK(num_tokens <= int64_t{0x7FFFFFFF});
  if (num_tokens == 0) return;
  const int64_t row = num_kv_heads * head_dim;
  WriteKvCacheFp8Kernel<<<static_cast<unsigned>(num_tokens), ThreadsFor(row), 0, stream>>>(
      k, v, slot_mapping, row, 1.0f / scale, k_cache, v_cache);
  TP_CUDA_CHECK_LAUNCH();
}

void WriteKvCache(const bf16* k, const bf16* v, const int64_t* slot_mapping, int64_t num_tokens,
                  int64_t num_kv_heads, int64_t head_dim, bf16* k_cache, bf16* v_cache,
                  cudaStream_t stream) {
  TP_CHECK(num_tokens >= 0 && num_kv_heads > 0 && head_dim > 0);
  TP_CHECK(num_tokens <= int64_t{0x7FFFFFFF});  // one block per token: the grid's x limit
  if (num_tokens == 0) return;
  const int64_t row = num_kv_heads * head_dim;  // one token, all KV heads
  if (row % kPackBf16 == 0 && IsPackAligned(k) && IsPackAligned(v) && IsPackAligned(k_cache) &&
      IsPackAligned(v_cache)) {
    Launch<kPackBf16>(k, v, slot_mapping, num_tokens, row / kPackBf16, k_cache, v_cache, stream);
  } else {
    Launch<1>(k, v, slot_mapping, num_tokens, row, k_cache, v_cache, stream);
  }
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
