#include "worker/logits_processor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "kernels/cpu/sampling.h"

namespace tpserve {
namespace {

// SplitMix64's finalizer: neighbouring (seed, index) pairs give unrelated streams.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The draft distributions may be float32 softmax outputs: allow their rounding.
constexpr double kDistributionSlack = 1e-3;

// Log-softmax of the raw row at `token` and at its `top` most likely tokens, appended to `out`.
void AppendLogprobs(absl::Span<const float> row, int32_t token, int32_t top, LogitsResult* out) {
  const float max = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (float x : row) sum += std::exp(static_cast<double>(x - max));
  const float log_sum = max + static_cast<float>(std::log(sum));
  out->logprobs.push_back(row[token] - log_sum);
  if (top == 0) return;
  std::vector<int32_t> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  const auto k = std::min<size_t>(top, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  for (size_t i = 0; i < k; ++i) {
    out->top_token_ids.push_back(ids[i]);
    out->top_logprobs.push_back(row[ids[i]] - log_sum);
  }
}

bool Allows(absl::Span<const uint32_t> mask, int64_t token) {
  return (mask[token / 32] >> (token % 32)) & 1u;
}

}  // namespace

uint64_t SampleStreamSeed(uint64_t seed, size_t output_len) { return Mix(seed ^ Mix(output_len)); }

void ApplyPenalties(const SamplingParams& params, absl::Span<const int32_t> prompt,
                    absl::Span<const int32_t> output, absl::Span<float> logits) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  auto in_vocab = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  // Sorted copies: the distinct seen tokens, and the output tokens with their counts as runs.
  std::vector<int32_t> out_sorted;
  out_sorted.reserve(output.size());
  for (int32_t id : output) {
    if (in_vocab(id)) out_sorted.push_back(id);
  }
  std::sort(out_sorted.begin(), out_sorted.end());
  if (params.repetition_penalty != 1.0f) {
    std::vector<int32_t> seen = out_sorted;
    for (int32_t id : prompt) {
      if (in_vocab(id)) seen.push_back(id);
    }
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    const float penalty = params.repetition_penalty;
    for (int32_t id : seen) {
      float& logit = logits[id];
      logit = logit > 0 ? logit / penalty : logit * penalty;
    }
  }
  for (size_t i = 0; i < out_sorted.size();) {
    size_t j = i;
    while (j < out_sorted.size() && out_sorted[j] == out_sorted[i]) ++j;
    logits[out_sorted[i]] -= static_cast<float>(j - i) * params.frequency_penalty;
    logits[out_sorted[i]] -= params.presence_penalty;
    i = j;
  }
}

void ApplyBitmask(absl::Span<const uint32_t> mask, absl::Span<float> logits) {
  for (int64_t t = 0; t < static_cast<int64_t>(logits.size()); ++t) {
    if (!Allows(mask, t)) logits[t] = -std::numeric_limits<float>::infinity();
  }
}

absl::Status CheckLogitsRequest(const LogitsRequest& r, int64_t num_rows, int64_t vocab) {
  if (r.first_row < 0 || r.num_rows < 1 || r.first_row + r.num_rows > num_rows) {
    return absl::InvalidArgumentError(absl::StrCat("logits rows [", r.first_row, ", ",
                                                   r.first_row + r.num_rows,
                                                   ") are outside the step's ", num_rows));
  }
  if (r.sample && r.params == nullptr) {
    return absl::InvalidArgumentError("a sampled sequence has no sampling parameters");
  }
  const int64_t k = static_cast<int64_t>(r.drafts.size());
  if (k > 0 && !r.sample) {
    return absl::InvalidArgumentError("draft tokens are verified only where the step samples");
  }
  if (r.sample && k != r.num_rows - 1) {
    return absl::InvalidArgumentError(absl::StrCat(k, " draft tokens need ", k + 1,
                                                   " logits rows; the sequence has ", r.num_rows));
  }
  for (int64_t i = 0; i < k; ++i) {
    if (r.drafts[i] < 0 || r.drafts[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("draft_token_ids[", i, "] = ", r.drafts[i],
                                                     " is outside the vocabulary of ", vocab));
    }
  }
  const int64_t words = BitmaskWords(vocab);
  if (!r.bitmask.empty()) {
    if (static_cast<int64_t>(r.bitmask.size()) != r.num_rows * words) {
      return absl::InvalidArgumentError(
          absl::StrCat("token_bitmask has ", r.bitmask.size(), " words; ", r.num_rows,
                       " rows of a vocabulary of ", vocab, " need ", r.num_rows * words));
    }
    for (int64_t row = 0; row < r.num_rows; ++row) {
      const absl::Span<const uint32_t> mask = r.bitmask.subspan(row * words, words);
      int64_t t = 0;
      while (t < vocab && !Allows(mask, t)) ++t;
      if (t == vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("token_bitmask row ", row, " allows no token of the vocabulary"));
      }
    }
  }
  if (!r.draft_probs.empty()) {
    if (static_cast<int64_t>(r.draft_probs.size()) != k * vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft_probs has ", r.draft_probs.size(), " values; ", k,
                       " drafts over a vocabulary of ", vocab, " need ", k * vocab));
    }
    for (int64_t i = 0; i < k; ++i) {
      const absl::Span<const float> q = r.draft_probs.subspan(i * vocab, vocab);
      double sum = 0;
      bool finite = true;
      for (float x : q) {
        finite = finite && std::isfinite(x) && x >= 0;
        sum += x;
      }
      if (!finite || std::abs(sum - 1.0) > kDistributionSlack || !(q[r.drafts[i]] > 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "draft_probs row ", i, " is not a distribution that could have proposed draft ",
            r.drafts[i], " (values >= 0 summing to 1, the draft's > 0)"));
      }
    }
  }
  if (r.top_logprobs < 0 || r.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs = ", r.top_logprobs, " is outside [0, ", kMaxTopLogprobs, "]"));
  }
  return absl::OkStatus();
}

// Speculative verification (Leviathan et al., 2023) and plain sampling are one loop: row k either
// verifies drafts[k] or, past the drafts (or at the first rejection), samples a token. Each row
// draws from its own stream, (seed, output position), so K = 0 is exactly plain sampling.
//   greedy: the row's pick is its argmax; a draft is accepted while it equals it, and the argmax
//     of the first row that disagrees is the correction;
//   sampling: with p the row's target distribution (cpu::SamplingDistribution after penalties and
//     mask) and q the draft's (a point mass without draft_probs), accept with probability
//     min(1, p(d) / q(d)); on rejection draw from norm(max(0, p - q)). The output is then
//     distributed as p exactly.
absl::Status CpuLogitsProcessor::Process(const float* logits, int64_t num_rows, int64_t vocab,
                                         absl::Span<const LogitsRequest> requests,
                                         std::vector<LogitsResult>* results) {
  results->assign(requests.size(), LogitsResult{});
  const int64_t words = BitmaskWords(vocab);
  std::vector<int32_t> history;
  for (size_t s = 0; s < requests.size(); ++s) {
    const LogitsRequest& r = requests[s];
    LogitsResult& out = (*results)[s];
    const float* first = logits + r.first_row * vocab;
    if (r.return_logits) out.logits.assign(first, first + r.num_rows * vocab);
    if (!r.sample) continue;
    const SamplingParams& params = *r.params;
    const int64_t k_drafts = static_cast<int64_t>(r.drafts.size());
    TP_CHECK(!params.has_penalties() || static_cast<int64_t>(r.output.size()) == r.output_len);
    history.assign(r.output.begin(), r.output.end());
    std::mt19937_64 rng;
    for (int64_t k = 0; k <= k_drafts; ++k) {
      const absl::Span<const float> raw(first + k * vocab, vocab);
      const float* row = raw.data();
      if (params.has_penalties() || !r.bitmask.empty() || !r.logit_bias.empty()) {
        row_.assign(raw.begin(), raw.end());
        for (const auto& [token, bias] : r.logit_bias) row_[token] += bias;
        if (params.has_penalties()) ApplyPenalties(params, r.prompt, history, absl::MakeSpan(row_));
        if (!r.bitmask.empty())
          ApplyBitmask(r.bitmask.subspan(k * words, words), absl::MakeSpan(row_));
        row = row_.data();
      }
      rng.seed(SampleStreamSeed(params.seed, r.output_len + k));
      int32_t token;
      bool accepted = false;
      if (k == k_drafts || cpu::IsGreedy(params)) {
        token = cpu::Sample(row, vocab, params, rng);
        accepted = k < k_drafts && token == r.drafts[k];
      } else {
        const int32_t draft = r.drafts[k];
        target_.resize(vocab);
        cpu::SamplingDistribution(row, vocab, params, target_.data());
        const float* q = r.draft_probs.empty() ? nullptr : r.draft_probs.data() + k * vocab;
        const double q_draft = q == nullptr ? 1.0 : q[draft];
        const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
        accepted = u * q_draft < target_[draft];
        token = draft;
        if (!accepted) {
          double residual = 0;
          for (int64_t t = 0; t < vocab; ++t) {
            const float q_t = q == nullptr ? (t == draft ? 1.0f : 0.0f) : q[t];
            target_[t] = std::max(0.0f, target_[t] - q_t);
            residual += target_[t];
          }
          // p <= q everywhere means p = q, where every draft is accepted; rounding may still
          // land here, and then p itself is the distribution to draw from.
          if (residual <= 0) cpu::SamplingDistribution(row, vocab, params, target_.data());
          token = cpu::SampleFromWeights(target_.data(), vocab, rng);
        }
      }
      out.tokens.push_back(token);
      if (r.logprobs) AppendLogprobs(raw, token, r.top_logprobs, &out);
      if (k < k_drafts && !accepted) break;
      history.push_back(token);
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve
