#include "coordinator/stop_strings.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

// Feeds `pieces` and returns the released text, with "|" where a stop string matched.
std::string Released(std::vector<std::string> stops, std::vector<std::string> pieces,
                     bool include_stop = false) {
  StopStringMatcher matcher(std::move(stops), include_stop);
  std::string out;
  for (const std::string& piece : pieces) {
    StopStringMatcher::Result r = matcher.Add(piece);
    out += r.text;
    if (r.matched) return out + "|";
  }
  return out + matcher.Flush();
}

TEST(StopStrings, ScenarioTable) {
  struct Case {
    std::vector<std::string> stops;
    std::vector<std::string> pieces;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{}, {"a", "b"}, "ab"},
      {{"\n\n"}, {"Hello", "\n", "\n", "World"}, "Hello|"},  // across tokens
      {{"END"}, {"the E", "N", "D and more"}, "the |"},      // split three ways
      {{"END"}, {"the E", "ND"}, "the |"},
      {{"END"}, {"EN", "X"}, "ENX"},          // a false start
      {{"END"}, {"E", "E", "N", "D"}, "E|"},  // restarts inside
      {{"stop", "op"}, {"xsto", "p"}, "x|"},  // earliest wins
      {{"abc"}, {"xab"}, "xab"},              // held, then flushed
      {{"abc"}, {"abc"}, "|"},                // at the very start
      {{"é!"}, {"caf", "é", "!"}, "caf|"},    // multi-byte
  };
  for (const Case& c : cases) {
    std::string joined;
    for (const auto& p : c.pieces) joined += "[" + p + "]";
    EXPECT_EQ(Released(c.stops, c.pieces), c.expected) << joined;
  }
}

TEST(StopStrings, IncludedStopStringsEndTheText) {
  EXPECT_EQ(Released({"END"}, {"the E", "N", "D and more"}, true), "the END|");
  EXPECT_EQ(Released({"stop", "op"}, {"xsto", "p"}, true), "xstop|");
  EXPECT_EQ(Released({"abc"}, {"xab"}, true), "xab");
}

TEST(StopStrings, NamesTheStopStringThatMatched) {
  StopStringMatcher matcher({"stop", "op", "x"});
  EXPECT_EQ(matcher.matched_stop(), "");
  EXPECT_FALSE(matcher.Add("a st").matched);
  EXPECT_EQ(matcher.matched_stop(), "");
  EXPECT_TRUE(matcher.Add("op").matched);
  EXPECT_EQ(matcher.matched_stop(), "stop");  // "op" completed at the same character, later start
  StopStringMatcher second({"stop", "op", "x"});
  EXPECT_TRUE(second.Add("oxo").matched);
  EXPECT_EQ(second.matched_stop(), "x");
}

// The text as a reader who sees it whole would cut it: at the first character that completes a
// stop string, before the earliest-starting one completed there (after it with include_stop).
std::string Reference(const std::vector<std::string>& stops, const std::string& text,
                      bool include_stop) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t start = std::string::npos;
    for (const std::string& stop : stops) {
      if (stop.size() <= end && text.compare(end - stop.size(), stop.size(), stop) == 0) {
        start = std::min(start, end - stop.size());
      }
    }
    if (start != std::string::npos) return text.substr(0, include_stop ? end : start) + "|";
  }
  return text;
}

TEST(StopStrings, AgreesWithAWholeTextReadingOnRandomPieces) {
  std::mt19937 random(7);
  auto word = [&](size_t max_length) {
    std::string w(1 + random() % max_length, 'a');
    for (char& c : w) c = "ab"[random() % 2];
    return w;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> stops;
    for (size_t i = 0, n = random() % 4; i < n; ++i) stops.push_back(word(5));
    const std::string text = word(24);
    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t n = 1 + random() % 4;
      pieces.push_back(text.substr(at, n));
      at += n;
    }
    const bool include_stop = trial % 2 == 1;
    EXPECT_EQ(Released(stops, pieces, include_stop), Reference(stops, text, include_stop))
        << text << " stops " << testing::PrintToString(stops);
  }
}

TEST(StopStrings, HeldTextIsReleasedAsSoonAsItCannotStartAStop) {
  StopStringMatcher matcher({"<|end|>"});
  EXPECT_EQ(matcher.Add("a <|en").text, "a ");
  EXPECT_EQ(matcher.Add("try").text, "<|entry");
  EXPECT_EQ(matcher.Flush(), "");
}

}  // namespace
}  // namespace tpserve
