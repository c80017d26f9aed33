// OutputProcessor on the bundled model's tokenizer: a step's tokens get their text, a stop
// string ends the sample at the token that completes it (what the step sampled after it is
// dropped, num_sampled with it), min_tokens defers the search, and Flush releases what was held.
#include "coordinator/output_processor.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/coordinator/bundled_model.h"

namespace tpserve {
namespace {

class OutputProcessorTest : public ::testing::Test {
 protected:
  // One update of `ids`, the first at generated position `first`, plus `unsent` sampled tokens
  // not in it (a final stop token).
  static SequenceUpdate Update(const std::vector<int32_t>& ids, int32_t first, int32_t unsent = 0) {
    SequenceUpdate update;
    for (size_t i = 0; i < ids.size(); ++i) {
      SequenceUpdate::Token& token = update.tokens.emplace_back();
      token.id = ids[i];
      token.position = first + static_cast<int32_t>(i);
    }
    update.num_sampled = static_cast<int32_t>(ids.size()) + unsent;
    return update;
  }
  static std::vector<int32_t> Encode(const std::string& text) {
    return BundledTokenizer()->Encode(text, /*parse_special=*/false).value();
  }
  static std::string Text(const SequenceUpdate& update) {
    std::string text;
    for (const auto& token : update.tokens) text += token.text;
    return text;
  }
};

TEST_F(OutputProcessorTest, TextOfEveryTokenWithoutStops) {
  GenerateParams params;
  OutputProcessor processor(*BundledTokenizer(), params);
  SequenceUpdate update = Update(Encode(" The capital of France is Paris."), 1);
  const size_t n = update.tokens.size();
  EXPECT_FALSE(processor.Process(update));
  EXPECT_EQ(update.tokens.size(), n);
  EXPECT_EQ(Text(update) + processor.Flush(), " The capital of France is Paris.");
}

TEST_F(OutputProcessorTest, AStopStringEndsTheSampleAtItsTokenAndDropsTheRest) {
  GenerateParams params;
  params.stop = {" France"};
  OutputProcessor processor(*BundledTokenizer(), params);
  const std::vector<int32_t> ids = Encode(" The capital of France is Paris.");
  SequenceUpdate update = Update(ids, 11, /*unsent=*/1);  // as a step that verified drafts
  ASSERT_TRUE(processor.Process(update));
  EXPECT_EQ(Text(update), " The capital of");
  ASSERT_FALSE(update.tokens.empty());
  EXPECT_LT(update.tokens.size(), ids.size());
  EXPECT_EQ(update.num_sampled, static_cast<int32_t>(update.tokens.size()));
  EXPECT_EQ(update.tokens.back().position, 10 + update.num_sampled);
  EXPECT_EQ(processor.Flush(), "") << "nothing after a stop string";
}

TEST_F(OutputProcessorTest, IncludeStopStrKeepsTheStopString) {
  GenerateParams params;
  params.stop = {" France"};
  params.include_stop_str_in_output = true;
  OutputProcessor processor(*BundledTokenizer(), params);
  SequenceUpdate update = Update(Encode(" The capital of France is Paris."), 1);
  ASSERT_TRUE(processor.Process(update));
  EXPECT_EQ(Text(update), " The capital of France");
}

TEST_F(OutputProcessorTest, MinTokensDefersTheSearch) {
  const std::vector<int32_t> ids = Encode(" France, France, France");
  GenerateParams params;
  params.stop = {"France"};
  params.min_tokens = 3;  // " France" "," " France" are positions 1..3: searched from 4 on
  OutputProcessor processor(*BundledTokenizer(), params);
  SequenceUpdate update = Update(ids, 1);
  ASSERT_TRUE(processor.Process(update));
  EXPECT_EQ(Text(update), " France, France, ");
}

TEST_F(OutputProcessorTest, FlushReleasesTheStartOfAStopStringThatNeverCompleted) {
  GenerateParams params;
  params.stop = {" Paris, Texas"};
  OutputProcessor processor(*BundledTokenizer(), params);
  SequenceUpdate update = Update(Encode(" The capital of France is Paris"), 1);
  EXPECT_FALSE(processor.Process(update));
  EXPECT_EQ(Text(update), " The capital of France is") << "' Paris' may begin the stop string";
  EXPECT_EQ(processor.Flush(), " Paris");
}

}  // namespace
}  // namespace tpserve
