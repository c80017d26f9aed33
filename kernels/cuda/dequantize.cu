#include <algorithm>

#include "common/check.h"
#include "kernels/cuda/dequantize.h"
#include "kernels/cuda/launch_check.h"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 256;

// Little-endian loads from byte pointers: GGUF blocks (18, 20, 34, 210 bytes) leave fields
// unaligned.
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

// Sub-block j's (0..7) 6-bit scale and min in Q4_K's and Q5_K's 12 scale bytes, as
// model/dequantize.cc's Q4KScaleMin unpacks them.
__device__ inline void ScaleMin(int j, const uint8_t* s, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 0x3F;
    *min = s[j + 4] & 0x3F;
  } else {
    *scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Element i (0..255) of a Q4_K or Q5_K super-block at b.
template <bool kFifthBit>
__device__ inline float DecodeKWithMins(const uint8_t* b, int i) {
  const int j = i >> 5;  // sub-block
  const int l = i & 31;
  int sc, m;
  ScaleMin(j, b + 4, &sc, &m);
  const float scale = __fmul_rn(Fp16ToFp32(LoadU16(b)), static_cast<float>(sc));
  const float min = __fmul_rn(Fp16ToFp32(LoadU16(b + 2)), static_cast<float>(m));
  const uint8_t byte = b[(kFifthBit ? 48 : 16) + 32 * (j >> 1) + l];
  int code = (j & 1) == 0 ? byte & 0x0F : byte >> 4;
  if constexpr (kFifthBit) code |= ((b[16 + l] >> j) & 1) << 4;
  return __fsub_rn(__fmul_rn(scale, static_cast<float>(code)), min);
}

// Element i (0..255) of a Q6_K super-block at b: in half h = i / 128, quarter k = (i % 128) / 32
// and l = i % 32, the low 4 bits are ql[64h + l] (k even) or ql[64h + l + 32] (k odd), low
// nibble for k < 2, and the top 2 bits are bit pair k of qh[32h + l].
__device__ inline float DecodeQ6_K(const uint8_t* b, int i) {
  const int half = i >> 7;
  const int k = (i >> 5) & 3;
  const int l = i & 31;
  const uint8_t low = b[64 * half + l + 32 * (k & 1)];
  const int q =
      ((k < 2 ? low & 0x0F : low >> 4) | (((b[128 + 32 * half + l] >> (2 * k)) & 3) << 4)) - 32;
  const int8_t scale = static_cast<int8_t>(b[192 + 8 * half + l / 16 + 2 * k]);
  return __fmul_rn(__fmul_rn(Fp16ToFp32(LoadU16(b + 208)), static_cast<float>(scale)),
                   static_cast<float>(q));
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
  } else if constexpr (kFormat == WeightFormat::kQ4_K) {
    return DecodeKWithMins<false>(src + 144 * (e >> 8), static_cast<int>(e & 255));
  } else if constexpr (kFormat == WeightFormat::kQ5_K) {
    return DecodeKWithMins<true>(src + 176 * (e >> 8), static_cast<int>(e & 255));
  } else if constexpr (kFormat == WeightFormat::kQ6_K) {
    return DecodeQ6_K(src + 210 * (e >> 8), static_cast<int>(e & 255));
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
    case WeightFormat::kQ4_K:
    case WeightFormat::kQ5_K:
    case WeightFormat::kQ6_K:
      return 256;
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
    case WeightFormat::kQ4_K:
      return 144;
    case WeightFormat::kQ5_K:
      return 176;
    case WeightFormat::kQ6_K:
      return 210;
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
    case WeightFormat::kQ4_K:
      Launch<WeightFormat::kQ4_K>(src, num_elements, dst, stream);
      break;
    case WeightFormat::kQ5_K:
      Launch<WeightFormat::kQ5_K>(src, num_elements, dst, stream);
      break;
    case WeightFormat::kQ6_K:
      Launch<WeightFormat::kQ6_K>(src, num_elements, dst, stream);
      break;
  }
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
