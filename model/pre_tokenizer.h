// The pre-tokenizer of byte-level BPE: splits text into the pieces ("words") that BPE merges
// stay inside, exactly as llama.cpp does for a GGUF `tokenizer.ggml.pre` name.
//
// A pre-tokenizer is a sequence of regex stages. Each stage splits every piece left by the
// previous stage on its own (a regex never matches across a piece boundary); text between two
// matches of a stage stays one piece. With
//   GPT2   = 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
//   LLAMA3 = (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+
//            |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// the stages by name are:
//   "smollm":   \p{N}, then GPT2
//   "gpt-2":    GPT2
//   "default":  [\p{P}\$\+<=>\^~\|]+, then GPT2, then \p{N}+, then [0-9][0-9][0-9]
//   "llama3", "llama-v3", "llama-bpe":
//               LLAMA3; and BPE skips merging a piece that is itself a token (ignore_merges)
//   "qwen2":    LLAMA3 with \p{N} for \p{N}{1,3} (one digit per piece)
//   "qwen35":   Qwen3.5's: qwen2's with \p{M} beside \p{L} (letter runs keep their combining
//               marks); like the two below, its tokenizer.json regex run by ICU
//   "deepseek-llm", "deepseek-coder":
//               their tokenizer.json's regex sequences (pre_tokenizer.cc), run by ICU's regex
//               engine with \s read as White_Space
//
// Character classes come from ICU: \p{L} is general category L*, \p{N} is N*, \p{P} is P*, and
// \s is the Unicode White_Space property (the set llama.cpp uses, including U+0085, U+00A0,
// U+2009 and U+3000). Each stage is a hand-written scanner over those classes (llama.cpp also
// scans the GPT-2 and Llama-3 regexes by hand); tokenizer_matches_llamacpp checks the result.
#pragma once

#include <unicode/regex.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve {

class PreTokenizer {
 public:
  // INVALID_ARGUMENT naming `name` and the supported names when it is not one of the above.
  static absl::StatusOr<PreTokenizer> Create(std::string_view name);

  // The pieces of `text` in order: non-empty, and their concatenation is `text`. The views point
  // into `text`. Precondition: `text` is valid UTF-8 (Tokenizer::Encode checks it first).
  std::vector<std::string_view> Split(std::string_view text) const;

  const std::string& name() const { return name_; }
  // When true, a piece whose byte-mapped text is a vocabulary token becomes that token without
  // BPE merges (llama.cpp's `ignore_merges`, set for the Llama-3 pre-tokenizer).
  bool ignore_merges() const { return ignore_merges_; }
  // The add-BOS default llama.cpp uses when the file has no `tokenizer.ggml.add_bos_token`
  // (true for the Llama-3 names).
  bool adds_bos_by_default() const { return adds_bos_by_default_; }

 private:
  enum class Stage {
    kEachNumber,        // \p{N}
    kGpt2,              // GPT2 above
    kLlama3,            // LLAMA3 above
    kQwen2,             // LLAMA3 with single digits
    kRegex,             // the next of regexes_
    kPunctuationRuns,   // [\p{P}\$\+<=>\^~\|]+
    kNumberRuns,        // \p{N}+
    kAsciiDigitTriples  // [0-9][0-9][0-9]
  };

  PreTokenizer(std::string name, std::vector<Stage> stages, bool llama3_family)
      : name_(std::move(name)),
        stages_(std::move(stages)),
        ignore_merges_(llama3_family),
        adds_bos_by_default_(llama3_family) {}

  std::string name_;
  std::vector<Stage> stages_;
  // One per kRegex stage, in order; shared by copies (ICU patterns are immutable and may be
  // matched from several threads).
  std::vector<std::shared_ptr<const icu::RegexPattern>> regexes_;
  bool ignore_merges_;
  bool adds_bos_by_default_;
};

}  // namespace tpserve
