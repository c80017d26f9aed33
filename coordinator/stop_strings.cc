#include "coordinator/stop_strings.h"

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace tpserve {

size_t PartialMatchLength(std::string_view text, std::string_view pattern) {
  for (size_t n = std::min(pattern.size() - 1, text.size()); n > 0; --n) {
    if (text.substr(text.size() - n) == pattern.substr(0, n)) return n;
  }
  return 0;
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& stop : stops_) TP_CHECK(!stop.empty());
}

StopStringMatcher::Result StopStringMatcher::Add(std::string_view piece) {
  TP_CHECK(!matched_);
  Result result;
  if (stops_.empty()) {
    result.text = std::string(piece);
    return result;
  }
  std::string text = std::move(held_);
  text.append(piece);
  held_.clear();
  // The earliest stop string wins: nothing after its start may be released.
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, text.find(stop));
  if (first != std::string::npos) {
    matched_ = true;
    result.matched = true;
    result.text = text.substr(0, first);
    return result;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) keep = std::max(keep, PartialMatchLength(text, stop));
  held_ = text.substr(text.size() - keep);
  text.resize(text.size() - keep);
  result.text = std::move(text);
  return result;
}

std::string StopStringMatcher::Flush() { return std::exchange(held_, std::string()); }

}  // namespace tpserve
