#include "model/pre_tokenizer.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <cstddef>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace tpserve {
namespace {

// Character classes of the regexes, from ICU.
enum CharClass : uint8_t {
  kLetter = 1 << 0,       // \p{L}
  kNumber = 1 << 1,       // \p{N}
  kPunctuation = 1 << 2,  // \p{P}
  kWhitespace = 1 << 3,   // \s: the White_Space property
};

uint8_t Classify(UChar32 c) {
  const uint32_t category = U_GET_GC_MASK(c);
  uint8_t classes = 0;
  if (category & U_GC_L_MASK) classes |= kLetter;
  if (category & U_GC_N_MASK) classes |= kNumber;
  if (category & U_GC_P_MASK) classes |= kPunctuation;
  if (u_isUWhiteSpace(c)) classes |= kWhitespace;
  return classes;
}

// The text as code points. Positions below are code point indices.
struct CodePoints {
  std::vector<UChar32> values;   // [n]
  std::vector<uint8_t> classes;  // [n] CharClass bits
  std::vector<size_t> offsets;   // [n + 1] byte offset of each code point, then the text size
};

CodePoints Decode(std::string_view text) {
  CodePoints cps;
  cps.values.reserve(text.size());
  cps.classes.reserve(text.size());
  cps.offsets.reserve(text.size() + 1);
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t length = static_cast<int32_t>(text.size());
  int32_t i = 0;
  while (i < length) {
    cps.offsets.push_back(static_cast<size_t>(i));
    UChar32 c;
    U8_NEXT(bytes, i, length, c);
    TP_CHECK_MSG(c >= 0, "PreTokenizer::Split needs valid UTF-8");
    cps.values.push_back(c);
    cps.classes.push_back(Classify(c));
  }
  cps.offsets.push_back(text.size());
  return cps;
}

// One piece [begin, end) of the previous stage. Lookups past `end` see nothing, so no match
// crosses a piece boundary.
class Piece {
 public:
  Piece(const CodePoints& cps, size_t begin, size_t end) : cps_(cps), begin_(begin), end_(end) {}

  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  // The code point at `i`, or -1 past the end.
  UChar32 At(size_t i) const { return i < end_ ? cps_.values[i] : -1; }
  bool Is(size_t i, uint8_t classes) const { return i < end_ && (cps_.classes[i] & classes); }
  // [^\s\p{L}\p{N}]
  bool IsOther(size_t i) const {
    return i < end_ && !(cps_.classes[i] & (kLetter | kNumber | kWhitespace));
  }
  bool IsLineBreak(size_t i) const { return At(i) == '\r' || At(i) == '\n'; }

 private:
  const CodePoints& cps_;
  size_t begin_;
  size_t end_;
};

// Length of 's|'t|'re|'ve|'m|'ll|'d at `pos` (0 when none); `any_case` also accepts 'S, 'RE, ...
size_t ContractionLength(const Piece& piece, size_t pos, bool any_case) {
  if (piece.At(pos) != '\'') return 0;
  auto lower = [&](size_t i) {
    const UChar32 c = piece.At(i);
    return any_case && c >= 0 ? u_tolower(c) : c;
  };
  const UChar32 first = lower(pos + 1);
  if (first == 's' || first == 't' || first == 'm' || first == 'd') return 2;
  const UChar32 second = lower(pos + 2);
  if ((first == 'r' && second == 'e') || (first == 'v' && second == 'e') ||
      (first == 'l' && second == 'l')) {
    return 3;
  }
  return 0;
}

// Whitespace run at `pos` as the last alternatives of both regexes match it: \s+(?!\S) leaves
// the last whitespace of a run that a non-space follows, so that it can prefix the next word;
// a single whitespace before a non-space, or a run ending the piece, is taken whole.
size_t WhitespaceRunEnd(const Piece& piece, size_t pos) {
  size_t n = 0;
  while (piece.Is(pos + n, kWhitespace)) ++n;
  TP_CHECK(n > 0);  // every other class was handled before
  return (n > 1 && pos + n < piece.end()) ? pos + n - 1 : pos + n;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
void SplitGpt2(const Piece& piece, std::vector<size_t>* ends) {
  size_t pos = piece.begin();
  while (pos < piece.end()) {
    if (const size_t n = ContractionLength(piece, pos, /*any_case=*/false)) {
      pos += n;
    } else {
      // An optional leading space joins the word that follows it.
      const size_t body = piece.At(pos) == ' ' ? pos + 1 : pos;
      if (piece.Is(body, kLetter) || piece.Is(body, kNumber)) {
        const uint8_t run_class = piece.Is(body, kLetter) ? kLetter : kNumber;
        pos = body;
        while (piece.Is(pos, run_class)) ++pos;
      } else if (piece.IsOther(body)) {
        pos = body;
        while (piece.IsOther(pos)) ++pos;
      } else {
        pos = WhitespaceRunEnd(piece, pos);
      }
    }
    ends->push_back(pos);
  }
}

// (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
// | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void SplitLlama3(const Piece& piece, std::vector<size_t>* ends) {
  size_t pos = piece.begin();
  while (pos < piece.end()) {
    const UChar32 c = piece.At(pos);
    if (const size_t n = ContractionLength(piece, pos, /*any_case=*/true)) {
      pos += n;
    } else if (!piece.IsLineBreak(pos) && !piece.Is(pos, kNumber) &&
               (piece.Is(pos, kLetter) || piece.Is(pos + 1, kLetter))) {
      ++pos;  // a letter, or one character of [^\r\n\p{L}\p{N}] before letters
      while (piece.Is(pos, kLetter)) ++pos;
    } else if (piece.Is(pos, kNumber)) {
      const size_t start = pos;
      while (piece.Is(pos, kNumber) && pos - start < 3) ++pos;
    } else if (const size_t body = c == ' ' ? pos + 1 : pos; piece.IsOther(body)) {
      pos = body;
      while (piece.IsOther(pos)) ++pos;
      while (piece.IsLineBreak(pos)) ++pos;
    } else {
      // \s*[\r\n]+ takes the run up to its last line break; otherwise as in GPT-2.
      size_t after_last_break = 0;
      for (size_t i = pos; piece.Is(i, kWhitespace); ++i) {
        if (piece.IsLineBreak(i)) after_last_break = i + 1;
      }
      pos = after_last_break > 0 ? after_last_break : WhitespaceRunEnd(piece, pos);
    }
    ends->push_back(pos);
  }
}

// Splits at the leftmost matches of a regex; `match_length(pos)` is the length of its match at
// `pos` (0 for none). Text between matches stays one piece.
template <typename MatchLength>
void SplitAtMatches(const Piece& piece, MatchLength match_length, std::vector<size_t>* ends) {
  size_t gap_begin = piece.begin();
  size_t pos = piece.begin();
  while (pos < piece.end()) {
    const size_t n = match_length(pos);
    if (n == 0) {
      ++pos;
      continue;
    }
    if (pos > gap_begin) ends->push_back(pos);
    pos += n;
    ends->push_back(pos);
    gap_begin = pos;
  }
  if (gap_begin < piece.end()) ends->push_back(piece.end());
}

bool IsAsciiDigit(UChar32 c) { return c >= '0' && c <= '9'; }

bool IsDefaultPunctuation(const Piece& piece, size_t i) {
  if (piece.Is(i, kPunctuation)) return true;
  const UChar32 c = piece.At(i);
  return c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' ||
         c == '|';
}

}  // namespace

absl::StatusOr<PreTokenizer> PreTokenizer::Create(std::string_view name) {
  using S = Stage;
  if (name == "smollm") {
    return PreTokenizer(std::string(name), {S::kEachNumber, S::kGpt2}, false);
  }
  if (name == "gpt-2") return PreTokenizer(std::string(name), {S::kGpt2}, false);
  if (name == "default") {
    return PreTokenizer(std::string(name),
                        {S::kPunctuationRuns, S::kGpt2, S::kNumberRuns, S::kAsciiDigitTriples},
                        false);
  }
  if (name == "llama3" || name == "llama-v3" || name == "llama-bpe") {
    return PreTokenizer(std::string(name), {S::kLlama3}, true);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported pre-tokenizer (tokenizer.ggml.pre) '",
                   absl::string_view(name.data(), name.size()),
                   "'; supported: smollm, gpt-2, default, llama3, llama-v3, llama-bpe"));
}

std::vector<std::string_view> PreTokenizer::Split(std::string_view text) const {
  if (text.empty()) return {};
  const CodePoints cps = Decode(text);
  std::vector<size_t> ends = {cps.values.size()};  // end of each piece, in order
  std::vector<size_t> next_ends;
  for (const Stage stage : stages_) {
    next_ends.clear();
    size_t begin = 0;
    for (const size_t end : ends) {
      const Piece piece(cps, begin, end);
      switch (stage) {
        case Stage::kEachNumber:
          SplitAtMatches(
              piece, [&](size_t i) -> size_t { return piece.Is(i, kNumber); }, &next_ends);
          break;
        case Stage::kGpt2:
          SplitGpt2(piece, &next_ends);
          break;
        case Stage::kLlama3:
          SplitLlama3(piece, &next_ends);
          break;
        case Stage::kPunctuationRuns:
          SplitAtMatches(
              piece,
              [&](size_t i) {
                size_t n = 0;
                while (IsDefaultPunctuation(piece, i + n)) ++n;
                return n;
              },
              &next_ends);
          break;
        case Stage::kNumberRuns:
          SplitAtMatches(
              piece,
              [&](size_t i) {
                size_t n = 0;
                while (piece.Is(i + n, kNumber)) ++n;
                return n;
              },
              &next_ends);
          break;
        case Stage::kAsciiDigitTriples:
          SplitAtMatches(
              piece,
              [&](size_t i) -> size_t {
                return IsAsciiDigit(piece.At(i)) && IsAsciiDigit(piece.At(i + 1)) &&
                               IsAsciiDigit(piece.At(i + 2))
                           ? 3
                           : 0;
              },
              &next_ends);
          break;
      }
      begin = end;
    }
    ends.swap(next_ends);
  }

  std::vector<std::string_view> pieces;
  pieces.reserve(ends.size());
  size_t begin = 0;
  for (const size_t end : ends) {
    pieces.push_back(text.substr(cps.offsets[begin], cps.offsets[end] - cps.offsets[begin]));
    begin = end;
  }
  return pieces;
}

}  // namespace tpserve
