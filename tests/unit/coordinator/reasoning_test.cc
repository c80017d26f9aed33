// The thinking split out of a reply (coordinator/reasoning.h, reply_stream.h): where thinking
// starts for each kind of prompt, the parser a chat template implies, and that what the stream
// releases, however the text is cut, adds up to the split of the whole text.
#include "coordinator/reasoning.h"

#include <string>
#include <vector>

#include "coordinator/reply_stream.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(ReasoningParser, AutoReadsTheTemplate) {
  const std::string r1 = "{{'<｜Assistant｜><think>\\n'}}{% set c = c.split('</think>')[-1] %}";
  const std::string qwen3 = "{% if enable_thinking is false %}<think>\\n\\n</think>{% endif %}";
  const std::string plain = "{% for m in messages %}{{ m.content }}{% endfor %}";
  EXPECT_EQ(*ResolveReasoningParser("auto", &r1), ReasoningParser::kDeepSeekR1);
  EXPECT_EQ(*ResolveReasoningParser("auto", &qwen3), ReasoningParser::kQwen3);
  EXPECT_EQ(*ResolveReasoningParser("auto", &plain), ReasoningParser::kNone);
  EXPECT_EQ(*ResolveReasoningParser("auto", nullptr), ReasoningParser::kNone);
  EXPECT_EQ(*ResolveReasoningParser("qwen3", &plain), ReasoningParser::kQwen3);
  EXPECT_EQ(*ResolveReasoningParser("none", &r1), ReasoningParser::kNone);
  const absl::StatusOr<ReasoningParser> unknown = ResolveReasoningParser("o1", &r1);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("o1"), std::string::npos);
}

TEST(ReasoningStart, FollowsThePrompt) {
  EXPECT_EQ(ReasoningStartOf(ReasoningParser::kDeepSeekR1, "<｜Assistant｜><think>\n"),
            ReasoningStart::kOpen);
  EXPECT_EQ(ReasoningStartOf(ReasoningParser::kQwen3, "<|im_start|>assistant\n"),
            ReasoningStart::kTagged);
  EXPECT_EQ(
      ReasoningStartOf(ReasoningParser::kQwen3, "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
      ReasoningStart::kNone);
  EXPECT_EQ(ReasoningStartOf(ReasoningParser::kNone, "<think>\n"), ReasoningStart::kNone);
}

TEST(SplitReasoning, SplitsEachKindOfStart) {
  ReasoningDelta open = SplitReasoning(ReasoningStart::kOpen, "let me see</think>\n\nFour.");
  EXPECT_EQ(open.reasoning, "let me see");
  EXPECT_EQ(open.content, "Four.");
  ReasoningDelta tagged = SplitReasoning(ReasoningStart::kTagged, "\n<think>hm</think>Yes");
  EXPECT_EQ(tagged.reasoning, "hm");
  EXPECT_EQ(tagged.content, "Yes");
  // A tagged model that answers without thinking: all content, its leading space kept.
  ReasoningDelta plain = SplitReasoning(ReasoningStart::kTagged, " <thin air");
  EXPECT_EQ(plain.reasoning, "");
  EXPECT_EQ(plain.content, " <thin air");
  // Thinking cut off by max_tokens is all reasoning, a partial closing tag included.
  ReasoningDelta cut = SplitReasoning(ReasoningStart::kOpen, "still thinking </thi");
  EXPECT_EQ(cut.reasoning, "still thinking </thi");
  EXPECT_EQ(cut.content, "");
  // A second </think> is content.
  ReasoningDelta twice = SplitReasoning(ReasoningStart::kOpen, "a</think>b</think>c");
  EXPECT_EQ(twice.reasoning, "a");
  EXPECT_EQ(twice.content, "b</think>c");
  ReasoningDelta none = SplitReasoning(ReasoningStart::kNone, "<think>x</think>y");
  EXPECT_EQ(none.content, "<think>x</think>y");
}

TEST(ReasoningStream, ReleasesTheWholeSplitHoweverCut) {
  const std::vector<std::pair<ReasoningStart, std::string>> cases = {
      {ReasoningStart::kOpen, "one <b>two</b> </thin three</think> \n four </think>"},
      {ReasoningStart::kTagged, "  <think>\nsteps</think>\n\nanswer"},
      {ReasoningStart::kTagged, "<thi"},
      {ReasoningStart::kTagged, "no thoughts"},
  };
  for (const auto& [start, text] : cases) {
    const ReasoningDelta whole = SplitReasoning(start, text);
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      for (size_t cut2 = cut; cut2 <= text.size(); ++cut2) {
        ReasoningStream stream(start);
        std::string reasoning, content;
        for (const std::string_view piece :
             {std::string_view(text).substr(0, cut), std::string_view(text).substr(cut, cut2 - cut),
              std::string_view(text).substr(cut2)}) {
          ReasoningDelta d = stream.Add(piece);
          reasoning += d.reasoning;
          content += d.content;
          // Nothing of a tag is ever released as text.
          EXPECT_EQ(d.reasoning.find("</think>"), std::string::npos) << text;
        }
        ReasoningDelta tail = stream.Finish();
        EXPECT_EQ(reasoning + tail.reasoning, whole.reasoning) << text << " cut " << cut;
        EXPECT_EQ(content + tail.content, whole.content) << text << " cut " << cut;
      }
    }
  }
}

TEST(ReplyStream, ParsesCallsOnlyAfterTheThinking) {
  ReplyStream stream(ReasoningStart::kOpen, ToolCallSyntax::kHermes);
  const std::string text =
      "maybe <tool_call>{\"name\": \"no\", \"arguments\": {}}</tool_call></think>\n"
      "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"x\": 1}}\n</tool_call>";
  ReplyDelta all;
  for (size_t i = 0; i <= text.size(); ++i) {
    // One byte at a time, then the end.
    ReplyDelta d = stream.Next(i < text.size() ? text.substr(i, 1) : "", i == text.size());
    all.reasoning += d.reasoning;
    all.content += d.content;
    for (ParsedToolCall& call : d.calls) all.calls.push_back(call);
  }
  EXPECT_EQ(all.reasoning, "maybe <tool_call>{\"name\": \"no\", \"arguments\": {}}</tool_call>");
  EXPECT_EQ(all.content, "");
  ASSERT_EQ(all.calls.size(), 1u);
  EXPECT_EQ(all.calls[0].name, "get");
  EXPECT_EQ(all.calls[0].arguments, "{\"x\":1}");
}

TEST(ReplyStream, WithoutReasoningDropsTheThinkingOnly) {
  ReplyStream stream(ReasoningStart::kOpen, std::nullopt, /*include_reasoning=*/false);
  const ReplyDelta first = stream.Next("steps</think>\n\nFo", false);
  const ReplyDelta last = stream.Next("ur.", true);
  EXPECT_EQ(first.reasoning + last.reasoning, "");
  EXPECT_EQ(first.content + last.content, "Four.");
}

}  // namespace
}  // namespace tpserve
