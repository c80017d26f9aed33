// What the per-instruction-set tile functions of the packed product share (packed_matmul.cc,
// packed_matmul_amx.cc). A tile function writes out[i * 16 + r]: the result of activation row
// i0 + i and weight row r of one group of 16, over every block in order, with exactly the
// operations packed_matmul.h states.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

#include "common/check.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/x86_intrinsics.h"

namespace tpserve::cpu {

inline int32_t LoadI32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Calls run.template operator()<kM>() for kM = rows, 1 <= rows <= 16.
template <typename Run, int... kMinus1>
void WithRows(int rows, Run&& run, std::integer_sequence<int, kMinus1...>) {
  TP_CHECK(rows >= 1 && rows <= static_cast<int>(sizeof...(kMinus1)));
  ((rows == kMinus1 + 1 ? (run.template operator()<kMinus1 + 1>(), 0) : 0), ...);
}
template <typename Run>
void WithRows(int rows, Run&& run) {
  WithRows(rows, std::forward<Run>(run), std::make_integer_sequence<int, kGroupRows>());
}

#if defined(__x86_64__)
// A Q4_0/Q4_1/Q8_0 record's fp16 block scales of its 16 rows (`scales` points past its codes),
// and Q4_1's minimums into *mw.
template <BlockFormat kFormat>
__attribute__((target("avx512f,f16c"))) inline void LoadBlockScalesZmm(const uint8_t* scales,
                                                                       __m512* dw, __m512* mw) {
  *dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
  if constexpr (kFormat == BlockFormat::kQ4_1) {
    *mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 32)));
  }
}
#endif

}  // namespace tpserve::cpu
