// Random inputs for kernel tests: values uniform in [-scale, scale].
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace tpserve::cpu {

inline std::vector<float> RandomVector(int64_t n, float scale, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> RandomVector(int64_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return RandomVector(n, scale, rng);
}

}  // namespace tpserve::cpu
