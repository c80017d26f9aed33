#include "model/jinja/py_string.h"

#include <algorithm>

#include "unicode/locid.h"
#include "unicode/uchar.h"
#include "unicode/unistr.h"

namespace tpserve::jinja {
namespace {

// Marks a byte that is not valid UTF-8; decoded so that encoding gives the byte back.
constexpr char32_t kRawByteBase = 0xDC00;  // lone low surrogates, as Python's surrogateescape

std::string CaseMap(std::string_view text, bool upper) {
  bool ascii = true;
  for (unsigned char c : text) ascii &= c < 0x80;
  if (ascii) {
    std::string out(text);
    for (char& c : out) {
      if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
      if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
  }
  icu::UnicodeString unicode = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (upper) {
    unicode.toUpper(icu::Locale::getRoot());
  } else {
    unicode.toLower(icu::Locale::getRoot());
  }
  std::string out;
  unicode.toUTF8String(out);
  return out;
}

bool IsCased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }

std::string MapOne(char32_t c, bool upper) {
  std::string one;
  AppendUtf8(c, &one);
  return CaseMap(one, upper);
}

}  // namespace

std::vector<char32_t> DecodeUtf8(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    int length = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    char32_t cp = length == 1   ? c
                  : length == 2 ? (c & 0x1F)
                  : length == 3 ? (c & 0x0F)
                                : (c & 0x07);
    bool valid = length > 0 && i + length <= text.size();
    for (int k = 1; valid && k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xC0) == 0x80;
      cp = (cp << 6) | (next & 0x3F);
    }
    if (!valid) {
      out.push_back(kRawByteBase + c);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += length;
  }
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp >= kRawByteBase + 0x80 && cp <= kRawByteBase + 0xFF) {
    out->push_back(static_cast<char>(cp - kRawByteBase));
  } else if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string EncodeUtf8(const std::vector<char32_t>& code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t cp : code_points) AppendUtf8(cp, &out);
  return out;
}

int64_t CodePointCount(std::string_view text) {
  int64_t ascii_bytes = 0;
  for (unsigned char c : text) ascii_bytes += c < 0x80;
  if (ascii_bytes == static_cast<int64_t>(text.size())) return ascii_bytes;
  return static_cast<int64_t>(DecodeUtf8(text).size());
}

bool PyIsSpace(char32_t c) {
  switch (c) {
    case ' ':
    case '\t':
    case '\n':
    case '\v':
    case '\f':
    case '\r':
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::string PyStrip(std::string_view text, const std::string* chars, StripSide side) {
  const std::vector<char32_t> cps = DecodeUtf8(text);
  const std::vector<char32_t> set = chars == nullptr ? std::vector<char32_t>() : DecodeUtf8(*chars);
  auto strip = [&](char32_t c) {
    return chars == nullptr ? PyIsSpace(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t begin = 0, end = cps.size();
  if (side != StripSide::kRight) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (side != StripSide::kLeft) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  return EncodeUtf8(std::vector<char32_t>(cps.begin() + begin, cps.begin() + end));
}

std::string PyUpper(std::string_view text) { return CaseMap(text, true); }
std::string PyLower(std::string_view text) { return CaseMap(text, false); }

std::string PyCapitalize(std::string_view text) {
  const std::vector<char32_t> cps = DecodeUtf8(text);
  if (cps.empty()) return "";
  std::string out = MapOne(cps[0], true);
  out += CaseMap(EncodeUtf8(std::vector<char32_t>(cps.begin() + 1, cps.end())), false);
  return out;
}

std::string PyTitle(std::string_view text) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : DecodeUtf8(text)) {
    out += MapOne(c, !previous_cased);
    previous_cased = IsCased(c);
  }
  return out;
}

std::vector<std::string> PySplit(std::string_view text, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep != nullptr) {
    size_t from = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t at = text.find(*sep, from);
      if (at == std::string_view::npos) break;
      parts.emplace_back(text.substr(from, at - from));
      from = at + sep->size();
    }
    parts.emplace_back(text.substr(from));
    return parts;
  }
  const std::vector<char32_t> cps = DecodeUtf8(text);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && PyIsSpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      size_t end = cps.size();
      while (end > i && PyIsSpace(cps[end - 1])) --end;
      parts.push_back(EncodeUtf8(std::vector<char32_t>(cps.begin() + i, cps.begin() + end)));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !PyIsSpace(cps[j])) ++j;
    parts.push_back(EncodeUtf8(std::vector<char32_t>(cps.begin() + i, cps.begin() + j)));
    i = j;
  }
  return parts;
}

std::vector<std::string> PyRSplit(std::string_view text, const std::string* sep, int64_t maxsplit) {
  if (maxsplit < 0) return PySplit(text, sep, maxsplit);
  std::vector<std::string> parts;
  if (sep != nullptr) {
    size_t end = text.size();
    while (static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t at = text.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      parts.emplace_back(text.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    parts.emplace_back(text.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  const std::vector<char32_t> cps = DecodeUtf8(text);
  int64_t i = static_cast<int64_t>(cps.size());
  while (true) {
    while (i > 0 && PyIsSpace(cps[i - 1])) --i;
    if (i == 0) break;
    if (static_cast<int64_t>(parts.size()) == maxsplit) {
      int64_t begin = 0;
      while (begin < i && PyIsSpace(cps[begin])) ++begin;
      parts.push_back(EncodeUtf8(std::vector<char32_t>(cps.begin() + begin, cps.begin() + i)));
      break;
    }
    int64_t j = i;
    while (j > 0 && !PyIsSpace(cps[j - 1])) --j;
    parts.push_back(EncodeUtf8(std::vector<char32_t>(cps.begin() + j, cps.begin() + i)));
    i = j;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> PySplitLines(std::string_view text) {
  const std::vector<char32_t> cps = DecodeUtf8(text);
  std::vector<std::string> lines;
  std::vector<char32_t> line;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool breaks = c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1C ||
                        c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!breaks) {
      line.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    lines.push_back(EncodeUtf8(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(EncodeUtf8(line));
  return lines;
}

std::string PyReplace(std::string_view text, std::string_view from, std::string_view to,
                      int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    const std::vector<char32_t> cps = DecodeUtf8(text);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out.append(to);
        ++done;
      }
      AppendUtf8(c, &out);
    }
    if (count < 0 || done < count) out.append(to);
    return out;
  }
  size_t at = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t found = text.find(from, at);
    if (found == std::string_view::npos) break;
    out.append(text.substr(at, found - at));
    out.append(to);
    at = found + from.size();
    ++done;
  }
  out.append(text.substr(at));
  return out;
}

std::vector<int64_t> SliceIndices(int64_t length, const int64_t* start, const int64_t* stop,
                                  int64_t step) {
  auto clamp = [&](const int64_t* bound, int64_t fallback) {
    if (bound == nullptr) return fallback;
    int64_t v = *bound;
    if (v < 0) v += length;
    if (step > 0) return std::clamp<int64_t>(v, 0, length);
    return std::clamp<int64_t>(v, -1, length - 1);
  };
  std::vector<int64_t> indices;
  if (step > 0) {
    for (int64_t i = clamp(start, 0), end = clamp(stop, length); i < end; i += step) {
      indices.push_back(i);
    }
  } else {
    for (int64_t i = clamp(start, length - 1), end = clamp(stop, -1); i > end; i += step) {
      indices.push_back(i);
    }
  }
  return indices;
}

}  // namespace tpserve::jinja
