// Speculative decoding's n-gram proposer (prompt lookup): a sequence that is quoting, rewriting
// or editing text it has seen tends to go on as it went on before, so the tokens that followed
// the latest earlier occurrence of its last n tokens are a cheap guess at its next ones. No model
// runs: the guesses cost only the rows the target verifies them in.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tpserve {

struct NgramOptions {
  int32_t min_n = 2;  // shortest suffix matched
  int32_t max_n = 4;  // longest suffix tried first
};

// Up to `k` tokens that followed the latest earlier occurrence of `tokens`' last n tokens, for
// the longest n in [min_n, max_n] that has one; empty when none does.
std::vector<int32_t> ProposeNgram(absl::Span<const int32_t> tokens, const NgramOptions& options,
                                  int32_t k);

}  // namespace tpserve
