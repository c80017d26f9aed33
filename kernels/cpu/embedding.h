// Token embedding lookup (fp32, CPU).
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// out[i, :] = table[ids[i], :] for i in [0, n).
//   table: [vocab, hidden]
//   ids:   [n]; every id must lie in [0, vocab). The caller validates client input first, so an
//          id out of range is a bug and aborts (TP_CHECK).
//   out:   [n, hidden]; must not overlap table.
void Embedding(const float* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n,
               float* out);

}  // namespace tpserve::cpu
