// bf16, the activation and weight type of the CUDA path (DESIGN.md "Numerics"), and the small
// helpers the kernels and their tests share. Usable from host code (the host compiler) and device
// code (nvcc).
//
// Conversions round to nearest even; values are converted to fp32 for all arithmetic and rounded
// to bf16 once, on store.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

namespace tpserve::cuda {

using bf16 = __nv_bfloat16;

__host__ __device__ inline float ToFloat(bf16 x) { return __bfloat162float(x); }
__host__ __device__ inline bf16 ToBf16(float x) { return __float2bfloat16_rn(x); }

// Host-side bulk conversions, for uploads of fp32 data and for tests.
inline std::vector<bf16> ToBf16(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = ToBf16(x[i]);
  return out;
}
inline std::vector<float> ToFloat(const std::vector<bf16>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = ToFloat(x[i]);
  return out;
}

// N bf16 values that move as one load or store of 2N bytes.
template <int N>
struct alignas(2 * N) Bf16Vec {
  bf16 v[N];
};

// The 16-byte vector (the widest single load) that the row and elementwise kernels use when a
// row length is a multiple of kPackBf16 and every pointer is 16-byte aligned (IsPackAligned);
// otherwise they fall back to one element at a time (Bf16Vec<1>).
inline constexpr int kPackBf16 = 8;
using Bf16Pack = Bf16Vec<kPackBf16>;
static_assert(sizeof(Bf16Pack) == 16 && alignof(Bf16Pack) == 16);

__host__ __device__ inline bool IsPackAligned(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & (sizeof(Bf16Pack) - 1)) == 0;
}

}  // namespace tpserve::cuda
