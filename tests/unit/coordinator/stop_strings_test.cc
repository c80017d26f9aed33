#include "coordinator/stop_strings.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

// Feeds `pieces` and returns the released text, with "|" where a stop string matched.
std::string Released(std::vector<std::string> stops, std::vector<std::string> pieces) {
  StopStringMatcher matcher(std::move(stops));
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

TEST(StopStrings, HeldTextIsReleasedAsSoonAsItCannotStartAStop) {
  StopStringMatcher matcher({"<|end|>"});
  EXPECT_EQ(matcher.Add("a <|en").text, "a ");
  EXPECT_EQ(matcher.Add("try").text, "<|entry");
  EXPECT_EQ(matcher.Flush(), "");
}

}  // namespace
}  // namespace tpserve
