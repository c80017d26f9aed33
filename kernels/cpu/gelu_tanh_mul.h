// Gemma's gated activation (fp32, CPU): GELU with the tanh approximation, as Hugging Face's
// gelu_pytorch_tanh.
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// out[i] = gelu(gate[i]) * up[i], gelu(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))),
// for i in [0, n). out may be the same pointer as gate or up.
void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out);

}  // namespace tpserve::cpu
