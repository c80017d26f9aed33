// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011), the
// counter-based generator that curand's Philox also implements. Its output is a pure function of
// (counter, key): a sampling draw depends only on the request's seed and the index of the draw,
// never on which block, launch or batch position computes it. Host and device, so tests can
// check it against the published known-answer vectors without a GPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TP_HOST_DEVICE __host__ __device__
#else
#define TP_HOST_DEVICE
#endif

namespace tpserve::cuda {

struct PhiloxBlock {
  uint32_t v[4];
};

// Random123's philox4x32_R with R = 10: each round multiplies words 0 and 2 by fixed odd
// constants, mixes the high halves with words 1, 3 and the key; the key is bumped by the Weyl
// constants between rounds.
TP_HOST_DEVICE inline PhiloxBlock Philox4x32_10(PhiloxBlock counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u;
  constexpr uint32_t kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u;
  constexpr uint32_t kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * counter.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * counter.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32);
    const uint32_t lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32);
    const uint32_t lo1 = static_cast<uint32_t>(p1);
    counter = PhiloxBlock{{hi1 ^ counter.v[1] ^ key0, lo1, hi0 ^ counter.v[3] ^ key1, lo0}};
    key0 += kW0;
    key1 += kW1;
  }
  return counter;
}

// The 64 random bits of a request's draw number `draw_index` (0 for its first sampled token, 1 for
// the next, ...): Philox4x32-10 with key = seed and counter = (draw_index, 0), the first two
// output words as high and low halves.
TP_HOST_DEVICE inline uint64_t SamplingRandomBits(uint64_t seed, uint64_t draw_index) {
  const PhiloxBlock out =
      Philox4x32_10(PhiloxBlock{{static_cast<uint32_t>(draw_index),
                                 static_cast<uint32_t>(draw_index >> 32), 0u, 0u}},
                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return (static_cast<uint64_t>(out.v[0]) << 32) | out.v[1];
}

}  // namespace tpserve::cuda
