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

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops, bool include_stop)
    : include_stop_(include_stop) {
  for (std::string& text : stops) {
    TP_CHECK(!text.empty());
    Stop& stop = stops_.emplace_back();
    stop.fail.assign(text.size(), 0);
    for (size_t i = 1, k = 0; i < text.size(); ++i) {
      while (k > 0 && text[i] != text[k]) k = stop.fail[k - 1];
      if (text[i] == text[k]) ++k;
      stop.fail[i] = k;
    }
    stop.text = std::move(text);
  }
}

StopStringMatcher::Result StopStringMatcher::Add(std::string_view piece) {
  TP_CHECK(!matched_);
  Result result;
  if (stops_.empty()) {
    result.text = std::string(piece);
    return result;
  }
  const size_t base = held_.size();
  held_.append(piece);
  for (size_t j = base; j < held_.size(); ++j) {
    const char c = held_[j];
    size_t start = std::string::npos;  // of the stop string completed at j that started first
    const Stop* first = nullptr;
    for (Stop& stop : stops_) {
      while (stop.state > 0 && c != stop.text[stop.state]) stop.state = stop.fail[stop.state - 1];
      if (c == stop.text[stop.state]) ++stop.state;
      if (stop.state == stop.text.size() && j + 1 - stop.text.size() < start) {
        start = j + 1 - stop.text.size();
        first = &stop;
      }
    }
    if (first != nullptr) {
      matched_ = true;
      matched_stop_ = first->text;
      result.matched = true;
      result.text = held_.substr(0, include_stop_ ? j + 1 : start);
      held_.clear();
      return result;
    }
  }
  // Hold back the longest partial match; everything before it can no longer start a stop string.
  size_t keep = 0;
  for (const Stop& stop : stops_) keep = std::max(keep, stop.state);
  result.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return result;
}

std::string StopStringMatcher::Flush() { return std::exchange(held_, std::string()); }

}  // namespace tpserve
