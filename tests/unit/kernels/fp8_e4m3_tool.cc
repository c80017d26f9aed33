// The E4M3 conversions of kernels/cpu/fp8_e4m3.h as a filter, for fp8_e4m3_test.py to compare
// with ml_dtypes: reads little-endian float32 values from stdin until its end, writes their codes
// (ToE4m3, one byte each), then the value of every code 0..255 (FromE4m3, float32 each).
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cpu/fp8_e4m3.h"

int main() {
  std::vector<float> values;
  float x;
  while (std::fread(&x, sizeof(x), 1, stdin) == 1) values.push_back(x);
  for (float v : values) std::putchar(tpserve::cpu::ToE4m3(v));
  for (int code = 0; code < 256; ++code) {
    const float value = tpserve::cpu::FromE4m3(static_cast<uint8_t>(code));
    std::fwrite(&value, sizeof(value), 1, stdout);
  }
  return 0;
}
