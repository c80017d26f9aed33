// kernels/cpu/fp8_matmul.h as a filter, for fp8_matmul_test.py to compare with ml_dtypes and NumPy.
// Reads m, n, k (little-endian int64), then a [m, k] and b [n, k] as float32; writes a's codes,
// a's scales, b's codes, b's scales (QuantizeRowsE4m3) and c = MatmulE4m3BT [m, n] as float32.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cpu/fp8_matmul.h"

namespace {

template <typename T>
bool Read(std::vector<T>& out) {
  return std::fread(out.data(), sizeof(T), out.size(), stdin) == out.size();
}
template <typename T>
void Write(const std::vector<T>& values) {
  std::fwrite(values.data(), sizeof(T), values.size(), stdout);
}

}  // namespace

int main() {
  std::vector<int64_t> shape(3);
  if (!Read(shape) || shape[0] < 0 || shape[1] < 0 || shape[2] < 0) {
    std::fputs("fp8_matmul_tool: expected m, n, k as int64\n", stderr);
    return 2;
  }
  const int64_t m = shape[0], n = shape[1], k = shape[2];
  std::vector<float> a(m * k), b(n * k);
  if (!Read(a) || !Read(b)) {
    std::fputs("fp8_matmul_tool: input shorter than m*k + n*k float32 values\n", stderr);
    return 2;
  }
  std::vector<uint8_t> a_codes(m * k), b_codes(n * k);
  std::vector<float> a_scales(m), b_scales(n), c(m * n);
  tpserve::cpu::QuantizeRowsE4m3(a.data(), m, k, a_codes.data(), a_scales.data());
  tpserve::cpu::QuantizeRowsE4m3(b.data(), n, k, b_codes.data(), b_scales.data());
  tpserve::cpu::MatmulE4m3BT(a_codes.data(), a_scales.data(), b_codes.data(), b_scales.data(), m, n,
                             k, c.data());
  Write(a_codes);
  Write(a_scales);
  Write(b_codes);
  Write(b_scales);
  Write(c);
  return 0;
}
