// What the gated activations' tests share: the kernel (out = act(gate) * up) against the
// activation's formula in double on random inputs whose length is not a multiple of the vector
// width (so both the vector body and the scalar tail run), and the same result in place.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tpserve::cpu {

// `kernel(gate, up, n, out)`; `act(x)` in double; `tolerance` relative to max(1, |expected|).
template <typename Kernel, typename Activation>
void ExpectMatchesFormulaAndWorksInPlace(Kernel kernel, Activation act, double tolerance,
                                         uint64_t seed) {
  const int64_t n = 10007;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-12.0f, 12.0f);
  std::vector<float> gate(n), up(n);
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = dist(rng);
    up[i] = dist(rng);
  }
  std::vector<float> out(n);
  kernel(gate.data(), up.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const double want = act(static_cast<double>(gate[i])) * up[i];
    ASSERT_NEAR(out[i], want, tolerance * std::max(1.0, std::abs(want))) << "index " << i;
  }
  std::vector<float> in_place = gate;
  kernel(in_place.data(), up.data(), n, in_place.data());
  EXPECT_EQ(in_place, out);
}

}  // namespace tpserve::cpu
