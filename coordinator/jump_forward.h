// Jump-forward decoding (SGLang's compressed FSM): where the output constraint allows only one
// continuation, its tokens are appended without sampling and computed in the next step as one
// chunk, instead of one decode step each.
//
// The token-boundary rule: the forced bytes are tokenized together with the token just sampled
// (which the workers have not computed yet), so that a token spanning the boundary (`{` then
// `"name"` is `{"` `name` `"`) comes out as the tokenizer would write the whole text; that
// sampled token is replaced when the tokenization no longer starts with it. The last forced
// token is left to sampling when a longer token could start with it (`":` before `":"`), since
// the text after it is not known yet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/grammar.h"
#include "model/tokenizer.h"

namespace tpserve {

// Tokens one jump may append: a forced text runs as the next step's chunk, which must stay short.
inline constexpr int32_t kMaxJumpForwardTokens = 256;

class JumpForward {
 public:
  // `tokenizer` must outlive this.
  explicit JumpForward(const Tokenizer& tokenizer);

  // `sampled` was just accepted by `matcher`. Returns the tokens that take its place in the
  // output (the first is `sampled` itself unless the boundary rule replaced it), at most
  // `max_tokens` of them, with `matcher` advanced over them; or empty, with `matcher` unchanged,
  // when nothing is forced or the forced text does not tokenize back to itself. The forced text
  // searched is at most TPSERVE_JUMP_FORWARD_MAX_BYTES long (the bound built into xgrammar).
  std::vector<int32_t> Extend(TokenMatcher& matcher, int32_t sampled, int32_t max_tokens) const;

 private:
  // A token whose bytes begin another, longer token's.
  bool IsStrictPrefixOfAnother(std::string_view bytes) const;

  const Tokenizer& tokenizer_;
  std::vector<std::string> sorted_bytes_;  // every ordinary token's bytes, sorted
};

}  // namespace tpserve
