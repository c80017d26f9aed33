#include "kernels/cuda/dequantize.h"

#include <algorithm>

#include "common/check.h"
#include "kernels/cuda/launch_check.h"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

// Little-endian loads from byte pointers: GGUF blocks (18, 20, 34 bytes) leave fields unaligned.
__device__ inline uint32_t LoadU16(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
}
__device__ inline uint32_t LoadU32(const uint8_t* p) { return LoadU16(p) | (LoadU16(p + 2) << 16); }

// IEEE half to float, exact for every input (NaN payloads kept): the integer recipe of
// model/dequantize.h's Fp16ToFp32, so that both sides agree bit for bit.
__device__ inline float Fp16ToFp32(uint32_t bits) {
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return __uint_as_float(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = __fmul_rn(static_cast<float>(mantissa), 0x1p-24f);
    return sign != 0 ? -magnitude : magnitude;
  }
  return __uint_as_float(sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13));
}

// Element j (0..31) of the 4-bit block whose quants start at qs.
__device__ inline uint32_t Nibble(const uint8_t* qs, int j) {
  const uint32_t byte = qs[j & 15];
  return j < 16 ? (byte & 0x0F) : (byte >> 4);
}

// The fp32 value of element e (of any format but BF16), as model/dequantize.h computes it.
// __fmul_rn / __fadd_rn keep nvcc from contracting q * d + m into one FMA (one rounding instead of
// ggml's two).
template <WeightFormat kFormat>
__device__ inline float Decode(const uint8_t* src, int64_t e) {
  if constexpr (kFormat == WeightFormat::kF32) {
    return __uint_as_float(LoadU32(src + 4 * e));
  } else if constexpr (kFormat == WeightFormat::kF16) {
    return Fp16ToFp32(LoadU16(src + 2 * e));
  } else {
    const int j = static_cast<int>(e & 31);
    const int64_t block = e >> 5;
    if constexpr (kFormat == WeightFormat::kQ4_0) {
      const uint8_t* b = src + 18 * block;
      const float d = Fp16ToFp32(LoadU16(b));
      return __fmul_rn(static_cast<float>(static_cast<int>(Nibble(b + 2, j)) - 8), d);
    } else if constexpr (kFormat == WeightFormat::kQ4_1) {
      const uint8_t* b = src + 20 * block;
      const float d = Fp16ToFp32(LoadU16(b));
      const float m = Fp16ToFp32(LoadU16(b + 2));
      return __fadd_rn(__fmul_rn(static_cast<float>(Nibble(b + 4, j)), d), m);
    } else {
      static_assert(kFormat == WeightFormat::kQ8_0);
      const uint8_t* b = src + 34 * block;
      const float d = Fp16ToFp32(LoadU16(b));
      return __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + j])), d);
    }
  }
}

// One element per thread and iteration, so that the bf16 stores of a warp are contiguous; the
// block header (d, m) is re-read by the 32 threads of a block, from L1.
template <WeightFormat kFormat>
__global__ void DequantizeKernel(const uint8_t* __restrict__ src, int64_t num_elements,
                                 bf16* __restrict__ dst) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < num_elements;
       e += stride) {
    if constexpr (kFormat == WeightFormat::kBF16) {
      // Already bf16: copy the bits, NaN payloads included (a float round trip would not).
      dst[e] = __ushort_as_bfloat16(static_cast<unsigned short>(LoadU16(src + 2 * e)));
    } else {
      dst[e] = ToBf16(Decode<kFormat>(src, e));
    }
  }
}

template <WeightFormat kFormat>
void Launch(const uint8_t* src, int64_t num_elements, bf16* dst, cudaStream_t stream) {
  // Capped grid: a 100M-element tensor takes a few grid-stride iterations per thread.
  const int blocks =
      static_cast<int>(std::clamp<int64_t>((num_elements + kThreads - 1) / kThreads, 1, 65536));
  DequantizeKernel<kFormat><<<blocks, kThreads, 0, stream>>>(src, num_elements, dst);
}

}  // namespace

int64_t BlockElements(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
    case WeightFormat::kF16:
    case WeightFormat::kBF16:
      return 1;
    case WeightFormat::kQ4_0:
    case WeightFormat::kQ4_1:
    case WeightFormat::kQ8_0:
      return 32;
  }
  TP_CHECK_MSG(false, "unknown WeightFormat");
  return 0;
}

int64_t BlockBytes(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return 4;
    case WeightFormat::kF16:
    case WeightFormat::kBF16:
      return 2;
    case WeightFormat::kQ4_0:
      return 18;
    case WeightFormat::kQ4_1:
      return 20;
    case WeightFormat::kQ8_0:
      return 34;
  }
  TP_CHECK_MSG(false, "unknown WeightFormat");
  return 0;
}

void DequantizeToBf16(WeightFormat format, const uint8_t* src, int64_t num_elements, bf16* dst,
                      cudaStream_t stream) {
  TP_CHECK(num_elements >= 0 && num_elements % BlockElements(format) == 0);
  if (num_elements == 0) return;
  switch (format) {
    case WeightFormat::kF32:
      Launch<WeightFormat::kF32>(src, num_elements, dst, stream);
      break;
    case WeightFormat::kF16:
      Launch<WeightFormat::kF16>(src, num_elements, dst, stream);
      break;
    case WeightFormat::kBF16:
      Launch<WeightFormat::kBF16>(src, num_elements, dst, stream);
      break;
    case WeightFormat::kQ4_0:
      Launch<WeightFormat::kQ4_0>(src, num_elements, dst, stream);
      break;
    case WeightFormat::kQ4_1:
      Launch<WeightFormat::kQ4_1>(src, num_elements, dst, stream);
      break;
    case WeightFormat::kQ8_0:
      Launch<WeightFormat::kQ8_0>(src, num_elements, dst, stream);
      break;
  }
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
