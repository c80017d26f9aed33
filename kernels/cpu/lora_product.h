// The LoRA product of a few tokens of one adapter (worker/lora_shard.h): y_t += B · (A · x_t), with
// A [rank, in] and B stored transposed, [rank, out]. Each row of A and of Bᵀ is read once for all
// the tokens, while it is in cache: the adapter's bytes, not its arithmetic, bound the product.
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// The largest rank, and the most tokens one call takes.
inline constexpr int64_t kMaxLoraProductRank = 256;
inline constexpr int64_t kMaxLoraProductTokens = 8;

// x[t] and y[t] are the rows of token t, for t in [0, tokens).
void LoraProduct(const float* a, const float* bt, int64_t rank, int64_t in, int64_t out,
                 const float* const* x, float* const* y, int64_t tokens);

}  // namespace tpserve::cpu
