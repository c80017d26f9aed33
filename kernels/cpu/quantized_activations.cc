#include "kernels/cpu/quantized_activations.h"

#include <cmath>

#include "common/check.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/x86_intrinsics.h"

namespace tpserve::cpu {
namespace {

// The block's scale and its reciprocal multiplier; both paths compute them with these scalar ops.
struct BlockScale {
  float d;
  float id;
};
inline BlockScale ScaleFor(float max_abs) {
  return {max_abs / 127.0f, max_abs != 0.0f ? 127.0f / max_abs : 0.0f};
}

void Resize(int64_t rows, int64_t k, QuantizedActivations* out) {
  TP_CHECK(rows >= 0 && k >= 0 && k % 32 == 0);
  out->rows = rows;
  out->k = k;
  const int64_t blocks = rows * (k / 32);
  out->q.resize(rows * k);
  out->d.resize(blocks);
  out->sum.resize(blocks);
  out->sum_lo.resize(blocks);
  out->d_sum.resize(blocks);
}

inline void Finish(const BlockScale& scale, int32_t sum_lo, int32_t sum, int64_t b,
                   QuantizedActivations* out) {
  out->d[b] = scale.d;
  out->sum[b] = sum;
  out->sum_lo[b] = sum_lo;
  out->d_sum[b] = scale.d * static_cast<float>(sum);
}

void ScalarBlock(const float* v, int64_t b, QuantizedActivations* out) {
  float max_abs = 0.0f;
  for (int j = 0; j < 32; ++j) max_abs = std::fmax(max_abs, std::fabs(v[j]));
  const BlockScale scale = ScaleFor(max_abs);
  int8_t* q = out->q.data() + b * 32;
  int32_t sum = 0, sum_lo = 0;
  for (int j = 0; j < 32; ++j) {
    // nearbyint rounds half to even in the default rounding mode, as vcvtps2dq does.
    q[j] = static_cast<int8_t>(std::nearbyint(v[j] * scale.id));
    sum += q[j];
    if (j == 15) sum_lo = sum;
  }
  Finish(scale, sum_lo, sum, b, out);
}

#if defined(__x86_64__)
#define TP_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

TP_TARGET_AVX512 void Avx512Block(const float* v, int64_t b, QuantizedActivations* out) {
  const __m512 x0 = _mm512_loadu_ps(v);
  const __m512 x1 = _mm512_loadu_ps(v + 16);
  const float max_abs = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
  const BlockScale scale = ScaleFor(max_abs);
  const __m512 id = _mm512_set1_ps(scale.id);
  const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id));
  const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));
  int8_t* q = out->q.data() + b * 32;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(q1));
  const int32_t sum_lo = _mm512_reduce_add_epi32(q0);
  Finish(scale, sum_lo, sum_lo + _mm512_reduce_add_epi32(q1), b, out);
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
}
#endif  // __x86_64__

// Rows below this are quantized on the calling thread: waking the pool costs more.
constexpr int64_t kParallelRows = 8;

void Split16Block(const float* v, int64_t b, QuantizedActivations* out) {
  float max_abs = 0.0f;
  for (int j = 0; j < 32; ++j) max_abs = std::fmax(max_abs, std::fabs(v[j]));
  const float d = max_abs / 32512.0f;
  const float id = max_abs != 0.0f ? 32512.0f / max_abs : 0.0f;
  // Block b of row i is block 2b - b % blocks of row 2i (the high bytes) and `blocks` after it of
  // row 2i + 1 (the low bytes).
  const int64_t blocks = out->k / 32;
  const int64_t high = 2 * b - b % blocks;
  const int64_t low = high + blocks;
  int8_t* qh = out->q.data() + high * 32;
  int8_t* ql = out->q.data() + low * 32;
  int32_t sum_h = 0, sum_l = 0, lo_h = 0, lo_l = 0;
  for (int j = 0; j < 32; ++j) {
    const int32_t q16 = static_cast<int32_t>(std::nearbyint(v[j] * id));
    const int32_t h = (q16 + 128) >> 8;
    qh[j] = static_cast<int8_t>(h);
    ql[j] = static_cast<int8_t>(q16 - 256 * h);
    sum_h += qh[j];
    sum_l += ql[j];
    if (j == 15) {
      lo_h = sum_h;
      lo_l = sum_l;
    }
  }
  Finish({256.0f * d, 0.0f}, lo_h, sum_h, high, out);
  Finish({d, 0.0f}, lo_l, sum_l, low, out);
}

}  // namespace

void QuantizeActivations16(const float* x, int64_t rows, int64_t k, QuantizedActivations* out) {
  Resize(2 * rows, k, out);
  const int64_t blocks = k / 32;
  const auto quantize = [&](int64_t begin, int64_t end) {
    for (int64_t b = begin * blocks; b < end * blocks; ++b) Split16Block(x + b * 32, b, out);
  };
  if (rows < kParallelRows) {
    quantize(0, rows);
  } else {
    ParallelFor(rows, FewChunksPerThread(rows), quantize);
  }
}

void QuantizeActivationsScalar(const float* x, int64_t rows, int64_t k, QuantizedActivations* out) {
  Resize(rows, k, out);
  for (int64_t b = 0; b < rows * (k / 32); ++b) ScalarBlock(x + b * 32, b, out);
}

void QuantizeActivations(const float* x, int64_t rows, int64_t k, QuantizedActivations* out) {
  Resize(rows, k, out);
  const int64_t blocks = k / 32;
  const auto quantize = [&](int64_t begin, int64_t end) {
#if defined(__x86_64__)
    if (HasAvx512()) {
      for (int64_t b = begin * blocks; b < end * blocks; ++b) Avx512Block(x + b * 32, b, out);
      return;
    }
#endif
    for (int64_t b = begin * blocks; b < end * blocks; ++b) ScalarBlock(x + b * 32, b, out);
  };
  if (rows < kParallelRows) {
    quantize(0, rows);
  } else {
    ParallelFor(rows, FewChunksPerThread(rows), quantize);
  }
}

}  // namespace tpserve::cpu
