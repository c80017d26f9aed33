// OutputProcessor on the bundled model's tokenizer: each token's text, a stop string ending the
// sample at the token that completes it, min_tokens deferring the search, and Flush releasing
// what was held back.
#include "coordinator/output_processor.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/coordinator/bundled_model.h"

namespace tpserve {
namespace {

std::vector<int32_t> Encode(const std::string& text) {
  return BundledTokenizer()->Encode(text, /*parse_special=*/false).value();
}

// Feeds `ids` as generated positions 1, 2, ... until a stop string ends the sample: the text
// released and how many tokens were taken.
struct Fed {
  std::string text;
  size_t taken = 0;
  bool stopped = false;
};
Fed Feed(OutputProcessor& processor, const std::vector<int32_t>& ids) {
  Fed fed;
  for (const int32_t id : ids) {
    std::string text;
    fed.stopped = processor.Add(id, static_cast<int32_t>(++fed.taken), &text);
    fed.text += text;
    if (fed.stopped) break;
  }
  return fed;
}

TEST(OutputProcessor, TextOfEveryTokenWithoutStops) {
  OutputProcessor processor(*BundledTokenizer(), GenerateParams());
  const Fed fed = Feed(processor, Encode(" The capital of France is Paris."));
  EXPECT_FALSE(fed.stopped);
  EXPECT_EQ(fed.text + processor.Flush(), " The capital of France is Paris.");
}

TEST(OutputProcessor, AStopStringEndsTheSampleAtTheTokenThatCompletesIt) {
  GenerateParams params;
  params.stop = {" France"};
  OutputProcessor processor(*BundledTokenizer(), params);
  const std::vector<int32_t> ids = Encode(" The capital of France is Paris.");
  const Fed fed = Feed(processor, ids);
  ASSERT_TRUE(fed.stopped);
  EXPECT_EQ(fed.text, " The capital of");
  EXPECT_LT(fed.taken, ids.size());
  EXPECT_EQ(processor.Flush(), "") << "nothing after a stop string";
}

TEST(OutputProcessor, IncludeStopStrKeepsTheStopString) {
  GenerateParams params;
  params.stop = {" France"};
  params.include_stop_str_in_output = true;
  OutputProcessor processor(*BundledTokenizer(), params);
  const Fed fed = Feed(processor, Encode(" The capital of France is Paris."));
  ASSERT_TRUE(fed.stopped);
  EXPECT_EQ(fed.text, " The capital of France");
}

TEST(OutputProcessor, MinTokensDefersTheSearch) {
  GenerateParams params;
  params.stop = {"France"};
  params.min_tokens = 3;  // " France" "," " France" are positions 1..3: searched from 4 on
  OutputProcessor processor(*BundledTokenizer(), params);
  const Fed fed = Feed(processor, Encode(" France, France, France"));
  ASSERT_TRUE(fed.stopped);
  EXPECT_EQ(fed.text, " France, France, ");
}

TEST(OutputProcessor, FlushReleasesTheStartOfAStopStringThatNeverCompleted) {
  GenerateParams params;
  params.stop = {" Paris, Texas"};
  OutputProcessor processor(*BundledTokenizer(), params);
  const Fed fed = Feed(processor, Encode(" The capital of France is Paris"));
  EXPECT_FALSE(fed.stopped);
  EXPECT_EQ(fed.text, " The capital of France is") << "' Paris' may begin the stop string";
  EXPECT_EQ(processor.Flush(), " Paris");
}

}  // namespace
}  // namespace tpserve
