#include "coordinator/prompt_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tpserve {

std::vector<TokenLogprob> PromptLogprobs(absl::Span<const float> logits,
                                         absl::Span<const int32_t> prompt, int64_t vocab,
                                         int32_t top_k) {
  std::vector<TokenLogprob> out(prompt.size());
  std::vector<int32_t> order(vocab);
  for (size_t i = 0; i < prompt.size(); ++i) {
    TokenLogprob& t = out[i];
    t.token_id = prompt[i];
    if (i == 0) {
      t.logprob = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const absl::Span<const float> row = logits.subspan((i - 1) * vocab, vocab);
    const double max = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (float x : row) sum += std::exp(static_cast<double>(x) - max);
    const double log_z = max + std::log(sum);
    const float chosen = row[t.token_id];
    t.logprob = static_cast<float>(chosen - log_z);
    t.rank = 1 + static_cast<int32_t>(
                     std::count_if(row.begin(), row.end(), [chosen](float x) { return x > chosen; }));
    if (top_k <= 0) continue;
    std::iota(order.begin(), order.end(), 0);
    const int64_t k = std::min<int64_t>(top_k, vocab);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&row](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (int64_t j = 0; j < k; ++j) {
      t.top.emplace_back(order[j], static_cast<float>(row[order[j]] - log_z));
    }
  }
  return out;
}

}  // namespace tpserve
