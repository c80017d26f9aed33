// Fuzzes output constraints over the bundled model's vocabulary: a regex, an EBNF grammar, a JSON
// schema or a list of choices is compiled (GrammarCompiler), and a TokenMatcher walks it for at
// most kSteps tokens, drawing each from its allow-list (NextMask) by the input's own bytes, with
// jump-forward (JumpForward::Extend) after every draw, as the scheduler does. Checked: a compile
// gives a grammar or an error status; every drawn token is accepted; a matcher reports an empty
// allow-list or an error instead of failing; a jump returns at most what it was allowed, every
// token of it accepted, and its text no longer than the bound built into xgrammar.
//
// Input: byte 0 picks the kind (mod 4: regex, grammar, schema, choices split at '\n'), byte 1
// seeds the draws, the rest is the constraint's text. Texts whose numbers add up to more than
// kMaxCounts are skipped: xgrammar unrolls a bounded repetition, so a text of many counts compiles
// for seconds, which the server bounds by its compile deadline and is no fault.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "coordinator/grammar.h"
#include "coordinator/jump_forward.h"
#include "fuzz/bundled_model.h"
#include "fuzz/require.h"

namespace tpserve {
namespace {

constexpr int kSteps = 48;
constexpr uint64_t kMaxCounts = 256;

bool HasLargeCounts(absl::string_view text) {
  uint64_t value = 0;
  uint64_t total = 0;
  for (char c : text) {
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      value = std::min<uint64_t>(value * 10 + static_cast<uint64_t>(c - '0'), kMaxCounts + 1);
    } else {
      total += value;
      value = 0;
    }
    if (total + value > kMaxCounts) return true;
  }
  return false;
}

OutputConstraint ConstraintOf(uint8_t kind, absl::string_view text) {
  OutputConstraint c;
  c.param = "constraint";
  switch (kind % 4) {
    case 0:
      c.kind = OutputConstraint::Kind::kRegex;
      c.spec = std::string(text);
      break;
    case 1:
      c.kind = OutputConstraint::Kind::kGrammar;
      c.spec = std::string(text);
      break;
    case 2:
      c.kind = OutputConstraint::Kind::kJsonSchema;
      c.spec = std::string(text);
      break;
    default:
      c.kind = OutputConstraint::Kind::kChoice;
      c.choices = absl::StrSplit(text, '\n');
      break;
  }
  return c;
}

// The n-th allowed token of `mask` counting from `start`, wrapping.
int32_t Draw(absl::Span<const uint32_t> mask, int64_t vocab, uint32_t start) {
  for (int64_t k = 0; k < vocab; ++k) {
    const int64_t t = (start + k) % vocab;
    if (mask[t / 32] & (1u << (t % 32))) return static_cast<int32_t>(t);
  }
  return -1;
}

}  // namespace
}  // namespace tpserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpserve;
  if (size < 2) return 0;
  const absl::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (HasLargeCounts(text)) return 0;
  const BundledModel& bundled = GetBundledModel();
  const Tokenizer& tokenizer = *bundled.tokenizer;
  static GrammarCompiler* compiler = new GrammarCompiler(tokenizer, int64_t{64} << 20, 64 << 10);
  static JumpForward* jump = new JumpForward(tokenizer);
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compiled =
      compiler->Compile(ConstraintOf(data[0], text));
  if (!compiled.ok()) {
    Require(compiled.status().code() == absl::StatusCode::kInvalidArgument,
            "a constraint that does not compile is INVALID_ARGUMENT");
    return 0;
  }
  TokenMatcher matcher(*compiled);
  const int64_t vocab = tokenizer.vocab_size();
  uint32_t seed = data[1];
  for (int step = 0; step < kSteps && !matcher.terminated(); ++step) {
    if (matcher.AllowsNothing()) break;
    const int32_t token = Draw(matcher.NextMask(), vocab, seed * 2654435761u + step * 40503u);
    Require(token >= 0, "a mask that allows something has a token");
    Require(matcher.Accept(token), "a token the mask allows is accepted");
    if (matcher.terminated()) break;
    const int32_t limit = 1 + static_cast<int32_t>((seed + step) % kMaxJumpForwardTokens);
    const std::vector<int32_t> jumped = jump->Extend(matcher, token, limit);
    Require(static_cast<int32_t>(jumped.size()) <= limit, "a jump stays within its limit");
    std::string bytes;
    for (int32_t id : jumped) {
      Require(id >= 0 && id < vocab, "jumped tokens inside the vocabulary");
      bytes += tokenizer.TokenBytes(id);
    }
    Require(bytes.size() <= tokenizer.TokenBytes(token).size() + TPSERVE_JUMP_FORWARD_MAX_BYTES,
            "a jump's text within the search bound");
    seed = seed * 31 + static_cast<uint32_t>(jumped.size());
  }
  Require(matcher.status().ok() || matcher.AllowsNothing(),
          "a failed matcher allows nothing");
  return 0;
}
