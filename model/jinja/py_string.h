// Python str semantics over UTF-8 text: templates index, slice, strip and case-map strings by
// code point with Python's Unicode rules, and byte-identical output needs the same answers.
// Invalid UTF-8 bytes count as one code point each (U+FFFD for case mapping), never an error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tpserve::jinja {

std::vector<char32_t> DecodeUtf8(std::string_view text);
std::string EncodeUtf8(const std::vector<char32_t>& code_points);
void AppendUtf8(char32_t code_point, std::string* out);
int64_t CodePointCount(std::string_view text);

// str.isspace() of one code point.
bool PyIsSpace(char32_t c);

enum class StripSide { kLeft, kRight, kBoth };
// str.strip() / lstrip() / rstrip(): `chars` null strips whitespace.
std::string PyStrip(std::string_view text, const std::string* chars, StripSide side);

std::string PyUpper(std::string_view text);
std::string PyLower(std::string_view text);
// str.capitalize(): first code point upper-cased, the rest lower-cased.
std::string PyCapitalize(std::string_view text);
// str.title(): a letter after a non-letter is upper-cased, other letters lower-cased.
std::string PyTitle(std::string_view text);

// str.split(sep, maxsplit): `sep` null splits on whitespace runs and drops empty parts;
// maxsplit < 0 is unlimited. Empty `sep` is the caller's error to report.
std::vector<std::string> PySplit(std::string_view text, const std::string* sep, int64_t maxsplit);
// str.rsplit(sep, maxsplit).
std::vector<std::string> PyRSplit(std::string_view text, const std::string* sep, int64_t maxsplit);
// str.splitlines(): \n, \r\n, \r, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029 end lines.
std::vector<std::string> PySplitLines(std::string_view text);
// str.replace(old, new, count); count < 0 replaces all.
std::string PyReplace(std::string_view text, std::string_view from, std::string_view to,
                      int64_t count);

// Python's slice of a sequence of `length` items: the indices it selects, in order.
// `step` must not be 0.
std::vector<int64_t> SliceIndices(int64_t length, const int64_t* start, const int64_t* stop,
                                  int64_t step);

}  // namespace tpserve::jinja
