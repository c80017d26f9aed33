#include "model/pre_tokenizer.h"

#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/utext.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

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

// (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}
// | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// with D = `max_digits` (3 for Llama 3, 1 for Qwen2).
void SplitLlama3(const Piece& piece, size_t max_digits, std::vector<size_t>* ends) {
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
      while (piece.Is(pos, kNumber) && pos - start < max_digits) ++pos;
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

// Splits at the matches of `regex` (ICU), run on the piece alone, as llama.cpp runs a
// pre-tokenizer's regexes that it has no hand-written scanner for.
void SplitAtRegex(const icu::RegexPattern& regex, const CodePoints& cps, std::string_view text,
                  const Piece& piece, std::vector<size_t>* ends) {
  const size_t byte_begin = cps.offsets[piece.begin()];
  const size_t byte_size = cps.offsets[piece.end()] - byte_begin;
  UErrorCode status = U_ZERO_ERROR;
  UText* utext =
      utext_openUTF8(nullptr, text.data() + byte_begin, static_cast<int64_t>(byte_size), &status);
  std::unique_ptr<icu::RegexMatcher> matcher(regex.matcher(status));
  TP_CHECK_MSG(U_SUCCESS(status), "ICU could not open a matcher");
  matcher->reset(utext);
  // Byte offset in the piece -> code point index in the text.
  auto index_of = [&](int64_t byte) {
    return static_cast<size_t>(std::lower_bound(cps.offsets.begin(), cps.offsets.end(),
                                                byte_begin + static_cast<size_t>(byte)) -
                               cps.offsets.begin());
  };
  size_t gap_begin = piece.begin();
  while (matcher->find(status) && U_SUCCESS(status)) {
    const size_t start = index_of(matcher->start64(status));
    const size_t end = index_of(matcher->end64(status));
    if (end == start) continue;
    if (start > gap_begin) ends->push_back(start);
    ends->push_back(end);
    gap_begin = end;
  }
  if (gap_begin < piece.end()) ends->push_back(piece.end());
  utext_close(utext);
}

// A regex of a pre-tokenizer as its tokenizer.json writes it, compiled with ICU. `\s` there means
// the White_Space property (as llama.cpp reads it), which ICU's own `\s` does not quite match.
std::shared_ptr<const icu::RegexPattern> CompileRegex(std::string_view source) {
  std::string pattern;
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\\' && i + 1 < source.size() &&
        (source[i + 1] == 's' || source[i + 1] == 'S')) {
      pattern += source[i + 1] == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
      ++i;
    } else {
      pattern += source[i];
      if (source[i] == '\\' && i + 1 < source.size()) pattern += source[++i];
    }
  }
  UErrorCode status = U_ZERO_ERROR;
  UParseError where;
  std::shared_ptr<const icu::RegexPattern> regex(icu::RegexPattern::compile(
      icu::UnicodeString::fromUTF8(icu::StringPiece(pattern.data(), pattern.size())), 0, where,
      status));
  TP_CHECK_MSG(U_SUCCESS(status) && regex != nullptr, "a built-in pre-tokenizer regex is invalid");
  return regex;
}

// The regexes of the pre-tokenizers written as ICU regexes rather than scanners, from their
// tokenizer.json; characters past ASCII as \x{...}, so that no editor's Unicode normalization
// can change a range (Kelvin sign, Ohm sign and Greek compatibility letters are in them).
constexpr std::string_view kDeepseekLlmRegexes[] = {
    "[\r\n]",
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-"
    "\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-"
    "\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"
    "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-"
    "\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"
    "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-"
    "\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-"
    "\\x{3002}]+",
    "\\s+$",
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}+",
};
constexpr std::string_view kDeepseekCoderRegexes[] = {
    "[\r\n]",      "\\s?\\p{L}+",
    "\\s?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}",
};

// Qwen3.5's tokenizer.json regex: qwen2's with combining marks (\p{M}) inside letter runs.
constexpr std::string_view kQwen35Regexes[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]"
    "+"
    "|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

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
  if (name == "qwen2") return PreTokenizer(std::string(name), {S::kQwen2}, false);
  auto regex_stages = [&](absl::Span<const std::string_view> sources) {
    PreTokenizer pre(std::string(name), std::vector<Stage>(sources.size(), S::kRegex), false);
    for (const std::string_view source : sources) pre.regexes_.push_back(CompileRegex(source));
    return pre;
  };
  if (name == "deepseek-llm") return regex_stages(kDeepseekLlmRegexes);
  if (name == "deepseek-coder") return regex_stages(kDeepseekCoderRegexes);
  if (name == "qwen35") return regex_stages(kQwen35Regexes);
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported pre-tokenizer (tokenizer.ggml.pre) '",
      absl::string_view(name.data(), name.size()),
      "'; supported: smollm, gpt-2, default, llama3, llama-v3, llama-bpe, qwen2, qwen35, "
      "deepseek-llm, deepseek-coder"));
}

std::vector<std::string_view> PreTokenizer::Split(std::string_view text) const {
  if (text.empty()) return {};
  const CodePoints cps = Decode(text);
  std::vector<size_t> ends = {cps.values.size()};  // end of each piece, in order
  std::vector<size_t> next_ends;
  size_t regexes_before = 0;  // kRegex stages so far: the first index of this stage's regex
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
          SplitLlama3(piece, 3, &next_ends);
          break;
        case Stage::kQwen2:
          SplitLlama3(piece, 1, &next_ends);
          break;
        case Stage::kRegex:
          SplitAtRegex(*regexes_[regexes_before], cps, text, piece, &next_ends);
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
    if (stage == Stage::kRegex) ++regexes_before;
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
