#include "coordinator/jump_forward.h"

#include <algorithm>

namespace tpserve {

JumpForward::JumpForward(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const TokenType type = tokenizer.token_type(id);
    if (type == TokenType::kNormal || type == TokenType::kByte) {
      sorted_bytes_.emplace_back(tokenizer.TokenBytes(id));
    }
  }
  std::sort(sorted_bytes_.begin(), sorted_bytes_.end());
}

bool JumpForward::IsStrictPrefixOfAnother(std::string_view bytes) const {
  // Every longer token that starts with `bytes` sorts right after the tokens equal to it.
  auto it = std::upper_bound(sorted_bytes_.begin(), sorted_bytes_.end(), bytes,
                             [](std::string_view a, const std::string& b) { return a < b; });
  return it != sorted_bytes_.end() && it->size() > bytes.size() &&
         std::string_view(*it).substr(0, bytes.size()) == bytes;
}

std::vector<int32_t> JumpForward::Extend(TokenMatcher& matcher, int32_t sampled,
                                         int32_t max_tokens) const {
  if (matcher.terminated() || max_tokens < 2) return {};
  const std::string forced = matcher.ForcedContinuation();
  if (forced.empty()) return {};
  const std::string_view head = tokenizer_.TokenBytes(sampled);
  const std::string text = std::string(head) + forced;
  absl::StatusOr<std::vector<int32_t>> encoded = tokenizer_.Encode(text, /*parse_special=*/false);
  if (!encoded.ok()) return {};  // the sampled token ends inside a UTF-8 character
  std::vector<int32_t> tokens = *std::move(encoded);
  // A tokenizer that writes the text differently in mid-output (SentencePiece's leading space)
  // does not give it back byte for byte: no jump then.
  std::string joined;
  for (int32_t id : tokens) joined += tokenizer_.TokenBytes(id);
  if (joined != text) return {};
  if (static_cast<int64_t>(tokens.size()) > max_tokens) {
    // The forced text goes on past the cut, so the last token kept is the tokenizer's own.
    for (size_t i = max_tokens; i < tokens.size(); ++i) {
      joined.resize(joined.size() - tokenizer_.TokenBytes(tokens[i]).size());
    }
    tokens.resize(max_tokens);
  } else if (!tokens.empty() && IsStrictPrefixOfAnother(tokenizer_.TokenBytes(tokens.back()))) {
    joined.resize(joined.size() - tokenizer_.TokenBytes(tokens.back()).size());
    tokens.pop_back();
  }
  // Only a jump past what was sampled is worth a chunk.
  if (joined.size() <= head.size()) return {};

  const bool keeps_sampled = tokens.front() == sampled;
  if (!keeps_sampled) matcher.Rollback(1);
  int accepted = 0;
  for (size_t i = keeps_sampled ? 1 : 0; i < tokens.size(); ++i) {
    if (!matcher.Accept(tokens[i])) {
      matcher.Rollback(accepted);
      if (!keeps_sampled) matcher.Accept(sampled);
      return {};
    }
    ++accepted;
  }
  return tokens;
}

}  // namespace tpserve
