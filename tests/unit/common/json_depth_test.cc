// JsonNestingDepth against nlohmann::json's parser, which reports the depth of every value it
// reads: hand-picked texts (brackets inside strings, escapes) and random nested documents.
// JsonValueEnd: what it cuts out of text around a value parses as that value.
#include "common/json_depth.h"

#include <algorithm>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::json;

// The deepest container nesting as nlohmann's parser sees it.
size_t ParserDepth(const std::string& text) {
  size_t deepest = 0;
  const json parsed = json::parse(text, [&deepest](int depth, json::parse_event_t event, json&) {
    if (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) {
      deepest = std::max(deepest, static_cast<size_t>(depth) + 1);
    }
    return true;
  });
  EXPECT_FALSE(parsed.is_discarded());
  return deepest;
}

TEST(JsonNestingDepthTest, CountsContainersNotStrings) {
  for (const std::string text : {
           R"(1)",
           R"("[[[{{{")",
           R"({"a": "]]]"})",
           R"({"a": "\"[[", "b": [1, [2, [3]]]})",
           R"([[], [[]], {"k": {"k": {}}}])",
           R"({"escaped backslash\\": ["x"]})",
       }) {
    EXPECT_EQ(JsonNestingDepth(text), ParserDepth(text)) << text;
  }
}

json RandomValue(std::mt19937& rng, int budget) {
  std::uniform_int_distribution<int> kind(0, budget > 0 ? 4 : 1);
  switch (kind(rng)) {
    case 0:
      return std::uniform_int_distribution<int>(-9, 9)(rng);
    case 1: {
      static const char* const kStrings[] = {"[", "]{", "\"}", "\\", "plain", ""};
      return kStrings[std::uniform_int_distribution<int>(0, 5)(rng)];
    }
    case 2:
    case 3: {
      json array = json::array();
      const int n = std::uniform_int_distribution<int>(0, 3)(rng);
      for (int i = 0; i < n; ++i) array.push_back(RandomValue(rng, budget - 1));
      return array;
    }
    default: {
      json object = json::object();
      const int n = std::uniform_int_distribution<int>(0, 3)(rng);
      for (int i = 0; i < n; ++i) object["k[" + std::to_string(i)] = RandomValue(rng, budget - 1);
      return object;
    }
  }
}

TEST(JsonNestingDepthTest, AgreesWithTheParserOnRandomDocuments) {
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    const std::string text = RandomValue(rng, 12).dump();
    ASSERT_EQ(JsonNestingDepth(text), ParserDepth(text)) << text;
  }
}

TEST(JsonNestingDepthTest, DeepBodiesAreMeasuredWithoutRecursion) {
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  EXPECT_EQ(JsonNestingDepth(deep), 1'000'000u);
}

TEST(JsonValueEndTest, CutsOutTheValueAndNothingElse) {
  for (const std::string value : {
           R"({})",
           R"({"a": "}"})",
           R"({"a": "\"}", "b": [1, {"c": "]"}]})",
           R"([{"x": 1}, [2]])",
       }) {
    const std::string text = "text before " + value + " and } after";
    const size_t start = text.find(value);
    const size_t end = JsonValueEnd(text, start);
    ASSERT_NE(end, std::string::npos) << value;
    EXPECT_EQ(json::parse(text.substr(start, end - start)), json::parse(value)) << value;
  }
  EXPECT_EQ(JsonValueEnd(R"({"a": [1, 2})", 0), std::string::npos);
  EXPECT_EQ(JsonValueEnd(R"({"a": "}")", 0), std::string::npos);
}

}  // namespace
}  // namespace tpserve
