// The gated activation of the Llama MLP (fp32, CPU).
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i], for i in [0, n).
//   gate, up, out: [n] (callers pass [num_tokens * intermediate_local]); out may be the same
//   pointer as gate or up.
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

}  // namespace tpserve::cpu
