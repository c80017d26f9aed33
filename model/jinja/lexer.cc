#include "model/jinja/lexer.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "model/jinja/py_string.h"

namespace tpserve::jinja {
namespace {

std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's `\s` over UTF-8: the length of the whitespace run starting at `at`.
size_t WhitespaceRun(std::string_view text, size_t at) {
  size_t i = at;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (!PyIsSpace(c)) break;
      ++i;
      continue;
    }
    size_t length = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    if (i + length > text.size()) break;
    const std::vector<char32_t> cp = DecodeUtf8(text.substr(i, length));
    if (cp.size() != 1 || !PyIsSpace(cp[0])) break;
    i += length;
  }
  return i - at;
}

std::string RstripWhitespace(std::string_view text) {
  return PyStrip(text, nullptr, StripSide::kRight);
}

class Lexer {
 public:
  explicit Lexer(std::string source) : source_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    while (pos < source_.size()) {
      const size_t tag = FindTag(pos);
      std::string text = source_.substr(pos, tag - pos);
      if (tag == source_.size()) {
        Emit(Token::Kind::kText, std::move(text), pos);
        break;
      }
      const char kind = source_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < source_.size() ? source_[tag + 2] : '\0';
      if (sign == '-') {
        text = RstripWhitespace(text);
      } else if (sign != '+' && kind != '{') {
        LstripBlock(pos, &text);
      }
      Emit(Token::Kind::kText, std::move(text), pos);
      size_t inside = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      absl::StatusOr<size_t> after = kind == '#'   ? SkipComment(tag, inside)
                                     : kind == '{' ? LexTag(tag, inside, /*block=*/false)
                                                   : LexTag(tag, inside, /*block=*/true);
      if (!after.ok()) return after.status();
      pos = *after;
    }
    tokens_.push_back({Token::Kind::kEnd, "", PositionOf(source_.size())});
    return std::move(tokens_);
  }

 private:
  size_t FindTag(size_t from) const {
    for (size_t i = source_.find('{', from); i != std::string::npos; i = source_.find('{', i + 1)) {
      if (i + 1 < source_.size() &&
          (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#')) {
        return i;
      }
    }
    return source_.size();
  }

  // lstrip_blocks: spaces and tabs between the start of the line and a block tag go.
  void LstripBlock(size_t text_start, std::string* text) const {
    const size_t newline = text->rfind('\n');
    const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
    if (newline == std::string::npos && text_start != 0 && source_[text_start - 1] != '\n') {
      return;
    }
    for (size_t i = line_start; i < text->size(); ++i) {
      const char c = (*text)[i];
      if (c != ' ' && c != '\t' && c != '\r' && c != '\v' && c != '\f') return;
    }
    text->resize(line_start);
  }

  // What follows a closing tag: `-` strips whitespace, trim_blocks one newline after blocks.
  size_t AfterClose(size_t close_end, char sign, bool trims) const {
    if (sign == '-') return close_end + WhitespaceRun(source_, close_end);
    if (sign != '+' && trims && close_end < source_.size() && source_[close_end] == '\n') {
      return close_end + 1;
    }
    return close_end;
  }

  absl::StatusOr<size_t> SkipComment(size_t tag, size_t inside) {
    const size_t close = source_.find("#}", inside);
    if (close == std::string::npos) return Error(tag, "unterminated comment '{#'");
    const char sign = close > inside ? source_[close - 1] : '\0';
    return AfterClose(close + 2, sign, /*trims=*/true);
  }

  absl::StatusOr<size_t> LexTag(size_t tag, size_t pos, bool block) {
    Emit(block ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin, "", tag);
    const char close = block ? '%' : '}';
    int depth = 0;  // open brackets: a '}' inside a dict literal does not end the tag
    const size_t first_token = tokens_.size();
    while (true) {
      while (pos < source_.size() && PyIsSpace(static_cast<unsigned char>(source_[pos]))) ++pos;
      if (pos >= source_.size()) {
        return Error(tag, block ? "unterminated block tag '{%'" : "unterminated '{{'");
      }
      const char c = source_[pos];
      const char next = pos + 1 < source_.size() ? source_[pos + 1] : '\0';
      const char after_next = pos + 2 < source_.size() ? source_[pos + 2] : '\0';
      if (depth == 0 && c == close && next == '}') {
        Emit(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "", pos);
        const size_t end = AfterClose(pos + 2, '\0', block);
        if (block) return MaybeRaw(first_token, end);
        return end;
      }
      if (depth == 0 && (c == '-' || c == '+') && next == close && after_next == '}') {
        Emit(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "", pos);
        const size_t end = AfterClose(pos + 3, c, block);
        if (block) return MaybeRaw(first_token, end);
        return end;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos;
        while (end < source_.size() &&
               (std::isalnum(static_cast<unsigned char>(source_[end])) || source_[end] == '_')) {
          ++end;
        }
        Emit(Token::Kind::kName, source_.substr(pos, end - pos), pos);
        pos = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = LexNumber(pos);
      } else if (c == '\'' || c == '"') {
        absl::StatusOr<size_t> end = LexString(pos);
        if (!end.ok()) return end.status();
        pos = *end;
      } else {
        static constexpr const char* kTwoChar[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* two : kTwoChar) {
          if (c == two[0] && next == two[1]) op = two;
        }
        if (op.size() == 1 &&
            std::string_view("+-*/%~<>=()[]{}.,:|").find(c) == std::string_view::npos) {
          return Error(pos, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        }
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        Emit(Token::Kind::kOperator, op, pos);
        pos += op.size();
      }
    }
  }

  // {% raw %}: the text up to {% endraw %} is literal.
  absl::StatusOr<size_t> MaybeRaw(size_t first_token, size_t end) {
    if (tokens_.size() != first_token + 2 || tokens_[first_token].kind != Token::Kind::kName ||
        tokens_[first_token].text != "raw") {
      return end;
    }
    const size_t begin_token = first_token - 1;
    for (size_t at = source_.find("{%", end); at != std::string::npos;
         at = source_.find("{%", at + 2)) {
      size_t i = at + 2;
      const bool strip_before = i < source_.size() && source_[i] == '-';
      if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) ++i;
      i += WhitespaceRun(source_, i);
      if (source_.compare(i, 6, "endraw") != 0) continue;
      i += 6;
      i += WhitespaceRun(source_, i);
      char sign = '\0';
      if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) sign = source_[i++];
      if (source_.compare(i, 2, "%}") != 0) continue;
      std::string text = source_.substr(end, at - end);
      if (strip_before) text = RstripWhitespace(text);
      tokens_.resize(begin_token);
      Emit(Token::Kind::kText, std::move(text), end);
      return AfterClose(i + 2, sign, /*trims=*/true);
    }
    return Error(end, "unterminated '{% raw %}' (no '{% endraw %}')");
  }

  size_t LexNumber(size_t pos) {
    size_t end = pos;
    auto digits = [&] {
      while (end < source_.size() &&
             (std::isdigit(static_cast<unsigned char>(source_[end])) || source_[end] == '_')) {
        ++end;
      }
    };
    digits();
    bool is_float = false;
    if (end + 1 < source_.size() && source_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(source_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < source_.size() && (source_[end] == 'e' || source_[end] == 'E')) {
      size_t exp = end + 1;
      if (exp < source_.size() && (source_[exp] == '+' || source_[exp] == '-')) ++exp;
      if (exp < source_.size() && std::isdigit(static_cast<unsigned char>(source_[exp]))) {
        is_float = true;
        end = exp;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i) {
      if (source_[i] != '_') text.push_back(source_[i]);
    }
    Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInt, std::move(text), pos);
    return end;
  }

  // Python's escapes, as jinja2 decodes string literals ("unicode-escape"); an unknown escape
  // keeps its backslash.
  absl::StatusOr<size_t> LexString(size_t pos) {
    const char quote = source_[pos];
    std::string value;
    size_t i = pos + 1;
    while (true) {
      if (i >= source_.size()) return Error(pos, "unterminated string literal");
      const char c = source_[i];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= source_.size()) return Error(pos, "unterminated string literal");
      const char e = source_[i + 1];
      i += 2;
      switch (e) {
        case 'n':
          value.push_back('\n');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'a':
          value.push_back('\a');
          break;
        case '\\':
          value.push_back('\\');
          break;
        case '\'':
          value.push_back('\'');
          break;
        case '"':
          value.push_back('"');
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + width > source_.size()) return Error(i - 2, "truncated \\x/\\u escape");
          char32_t cp = 0;
          for (size_t k = 0; k < width; ++k) {
            const char h = source_[i + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) {
              return Error(i - 2, "truncated \\x/\\u escape");
            }
            cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                     ? h - '0'
                                                     : std::tolower(h) - 'a' + 10);
          }
          if (cp > 0x10FFFF) return Error(i - 2, "escape beyond U+10FFFF");
          AppendUtf8(cp, &value);
          i += width;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < source_.size() && source_[i] >= '0' && source_[i] <= '7';
                 ++k) {
              cp = cp * 8 + static_cast<char32_t>(source_[i++] - '0');
            }
            AppendUtf8(cp, &value);
          } else {
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    Emit(Token::Kind::kString, std::move(value), pos);
    return i + 1;
  }

  Position PositionOf(size_t offset) {
    // Positions are mostly asked for in increasing order: advance a cursor, rewinding rarely.
    if (offset < cursor_) {
      cursor_ = 0;
      cursor_position_ = Position();
    }
    for (; cursor_ < offset && cursor_ < source_.size(); ++cursor_) {
      if (source_[cursor_] == '\n') {
        ++cursor_position_.line;
        cursor_position_.column = 1;
      } else if ((static_cast<unsigned char>(source_[cursor_]) & 0xC0) != 0x80) {
        ++cursor_position_.column;
      }
    }
    return cursor_position_;
  }

  void Emit(Token::Kind kind, std::string text, size_t offset) {
    if (kind == Token::Kind::kText && text.empty()) return;
    tokens_.push_back({kind, std::move(text), PositionOf(offset)});
  }

  absl::Status Error(size_t offset, absl::string_view what) {
    const Position p = PositionOf(offset);
    return absl::InvalidArgumentError(
        absl::StrCat("line ", p.line, " column ", p.column, ": ", what));
  }

  std::string source_;
  std::vector<Token> tokens_;
  size_t cursor_ = 0;
  Position cursor_position_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) {
  return Lexer(NormalizeNewlines(source)).Run();
}

}  // namespace tpserve::jinja
