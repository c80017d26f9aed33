#include "common/json_depth.h"

#include <algorithm>

namespace tpserve {
namespace {

// Brackets outside strings, one character at a time; a closer without an opener is ignored.
class BracketDepth {
 public:
  // The depth after `c`.
  size_t Add(char c) {
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '[' || c == '{') {
      ++depth_;
    } else if ((c == ']' || c == '}') && depth_ > 0) {
      --depth_;
    }
    return depth_;
  }

 private:
  size_t depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
};

}  // namespace

size_t JsonNestingDepth(std::string_view text) {
  BracketDepth brackets;
  size_t deepest = 0;
  for (const char c : text) deepest = std::max(deepest, brackets.Add(c));
  return deepest;
}

size_t JsonValueEnd(std::string_view text, size_t start) {
  BracketDepth brackets;
  for (size_t i = start; i < text.size(); ++i) {
    if (brackets.Add(text[i]) == 0) return i + 1;
  }
  return std::string_view::npos;
}

}  // namespace tpserve
