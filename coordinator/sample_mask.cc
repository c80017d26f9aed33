#include "coordinator/sample_mask.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/openai_error.h"

namespace tpserve {
namespace {

void Clear(std::vector<uint32_t>& mask, int32_t token) {
  mask[token / 32] &= ~(1u << (token % 32));
}

bool Empty(const std::vector<uint32_t>& mask) {
  return std::all_of(mask.begin(), mask.end(), [](uint32_t word) { return word == 0; });
}

absl::Status NothingLeft(const std::string& param, const Sequence& seq, absl::string_view why) {
  const std::string where =
      seq.num_generated() == 0
          ? std::string("no token may start the output")
          : absl::StrCat("no token may come after the ", seq.num_generated(),
                         " tokens generated so far");
  return WithParam(absl::InvalidArgumentError(absl::StrCat(param, ": ", where, " (", why, ")")),
                   param);
}

}  // namespace

absl::Status UpdateSampleMask(Sequence& seq, const absl::flat_hash_set<int32_t>& end_of_generation,
                              int64_t vocab_size) {
  const GenerateParams& p = seq.params;
  const bool before_min = seq.num_generated() < p.min_tokens;
  if (seq.token_matcher == nullptr && !before_min && p.allowed_token_ids.empty() &&
      p.bad_words_ids.empty()) {
    seq.mask.clear();
    return absl::OkStatus();
  }
  std::vector<uint32_t>& mask = seq.mask;
  if (seq.token_matcher != nullptr) {
    TokenMatcher& matcher = *seq.token_matcher;
    if (matcher.AllowsNothing()) {
      if (!matcher.status().ok()) return matcher.status();
      return NothingLeft(p.constraint.param, seq,
                         seq.num_generated() == 0 ? "the constraint's language is empty"
                                                  : "no text the constraint accepts continues it");
    }
    const absl::Span<const uint32_t> allowed = matcher.NextMask();
    mask.assign(allowed.begin(), allowed.end());
  } else {
    mask.assign((vocab_size + 31) / 32, ~0u);
    if (vocab_size % 32 != 0) mask.back() = (1u << (vocab_size % 32)) - 1;
  }
  if (!p.allowed_token_ids.empty()) {
    std::vector<uint32_t> allowed(mask.size(), 0u);
    for (int32_t id : p.allowed_token_ids) allowed[id / 32] |= 1u << (id % 32);
    for (size_t w = 0; w < mask.size(); ++w) mask[w] &= allowed[w];
    if (Empty(mask)) {
      return NothingLeft("allowed_token_ids", seq, "the output constraint allows none of them");
    }
  }
  for (const std::vector<int32_t>& word : p.bad_words_ids) {
    const size_t before = word.size() - 1;  // the tokens that must end the output so far
    if (before > static_cast<size_t>(seq.num_generated())) continue;
    if (std::equal(word.begin(), word.end() - 1, seq.tokens.end() - before)) Clear(mask, word.back());
  }
  if (!p.bad_words_ids.empty() && Empty(mask)) {
    return NothingLeft("bad_words", seq, "every token the rest allows is banned");
  }
  if (before_min) {
    std::vector<uint32_t> held = mask;
    for (int32_t id : end_of_generation) Clear(held, id);
    for (int32_t id : p.stop_token_ids) Clear(held, id);
    if (!Empty(held)) mask = std::move(held);
  }
  return absl::OkStatus();
}

}  // namespace tpserve
