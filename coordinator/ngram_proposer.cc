#include "coordinator/ngram_proposer.h"

#include <algorithm>

namespace tpserve {

std::vector<int32_t> ProposeNgram(absl::Span<const int32_t> tokens, const NgramOptions& options,
                                  int32_t k) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (k <= 0) return {};
  for (int64_t n = std::min<int64_t>(options.max_n, size - 1); n >= options.min_n; --n) {
    const absl::Span<const int32_t> suffix = tokens.subspan(size - n);
    // Latest first: the most recent context is the likeliest to repeat.
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t to = std::min<int64_t>(from + k, size);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to);
    }
  }
  return {};
}

}  // namespace tpserve
