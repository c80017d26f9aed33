// Tool calling's pieces: the family detected from a chat template, the structural-tag constraint
// (compiled by xgrammar over SmolLM2's vocabulary: a call in the family's syntax is accepted
// token by token and may end there; free text is not where a call is required), the parser of
// finished replies and the streaming one, which must release exactly what the whole-text parse
// gives however the text is split.
#include "coordinator/tool_calls.h"

#include <memory>
#include <string>
#include <vector>

#include "coordinator/grammar.h"
#include "coordinator/tool_call_parser.h"
#include "gtest/gtest.h"
#include "tests/unit/coordinator/bundled_model.h"

namespace tpserve {
namespace {

using nlohmann::ordered_json;

constexpr char kHermesCall[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

std::vector<ToolFunction> Tools() {
  return {{"get_weather", ordered_json::parse(R"({"type": "object", "properties": {"city":
              {"type": "string", "maxLength": 20}}, "required": ["city"]})")},
          {"get_time", ordered_json::parse(R"({"type": "object", "properties": {"timezone":
              {"type": "string", "maxLength": 20}}, "required": ["timezone"]})")}};
}

TEST(DetectToolCallFormat, ReadsTheFamilyFromTheTemplate) {
  const ToolCallFormat qwen = DetectToolCallFormat(
      "{%- if tools %}...<tools>{{ tool | tojson }}</tools>... <tool_call>\\n{\"name\": ...");
  EXPECT_EQ(qwen.syntax, ToolCallSyntax::kHermes);
  EXPECT_TRUE(qwen.template_renders_tools);
  const ToolCallFormat llama = DetectToolCallFormat(
      "{{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of "
      "argument name and its value}.' }}{%- for t in tools %}");
  EXPECT_EQ(llama.syntax, ToolCallSyntax::kLlama3Json);
  EXPECT_TRUE(llama.template_renders_tools);
  const ToolCallFormat chatml =
      DetectToolCallFormat("{% for message in messages %}<|im_start|>{{ message['content'] }}");
  EXPECT_EQ(chatml.syntax, ToolCallSyntax::kHermes);
  EXPECT_FALSE(chatml.template_renders_tools);
  const ToolCallFormat nemo = DetectToolCallFormat(
      "{{- \"[AVAILABLE_TOOLS][\" }}...{{- \"[TOOL_CALLS][\" }}{%- for tool_call in ...");
  EXPECT_EQ(nemo.syntax, ToolCallSyntax::kMistralJson);
  EXPECT_TRUE(nemo.template_renders_tools);
  const ToolCallFormat small = DetectToolCallFormat(
      "[AVAILABLE_TOOLS]...{{- '[TOOL_CALLS]' + tool_call.function.name }}{{- '[ARGS]' + ...");
  EXPECT_EQ(small.syntax, ToolCallSyntax::kMistralArgs);
}

TEST(ParseToolCalls, SplitsContentFromHermesCalls) {
  const ToolCallDelta parsed = ParseToolCalls(
      ToolCallSyntax::kHermes, std::string("  Let me look.\n") + kHermesCall + "\n" +
                                   "<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
                                   "{\"timezone\": \"CET\"}}\n</tool_call>\n");
  EXPECT_EQ(parsed.content, "Let me look.");
  ASSERT_EQ(parsed.calls.size(), 2u);
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  EXPECT_EQ(ordered_json::parse(parsed.calls[0].arguments), ordered_json({{"city", "Paris"}}));
  EXPECT_EQ(parsed.calls[1].name, "get_time");
}

TEST(ParseToolCalls, LeavesWhatIsNotACallAsText) {
  for (const std::string& text : {std::string("<tool_call> not a call"),
                                  std::string("<tool_call>\n{\"name\": \"f\"}\n</tool_call>"),
                                  std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}"),
                                  std::string("a <tool_ b")}) {
    const ToolCallDelta parsed = ParseToolCalls(ToolCallSyntax::kHermes, text);
    EXPECT_TRUE(parsed.calls.empty()) << text;
    EXPECT_EQ(parsed.content, text);
  }
}

TEST(ParseToolCalls, ReadsLlama3Json) {
  const ToolCallDelta parsed = ParseToolCalls(
      ToolCallSyntax::kLlama3Json,
      R"({"name": "get_weather", "parameters": {"city": "Rome", "note": "a } in \"text\""}})");
  EXPECT_EQ(parsed.content, "");
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  EXPECT_EQ(ordered_json::parse(parsed.calls[0].arguments)["note"], "a } in \"text\"");
}

TEST(ParseToolCalls, ReadsMistralsTwoSyntaxes) {
  const ToolCallDelta nemo = ParseToolCalls(
      ToolCallSyntax::kMistralJson,
      R"(Sure. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}, )"
      R"({"name": "get_time", "arguments": {"timezone": "CET"}, "id": "abcdefghi"}])");
  EXPECT_EQ(nemo.content, "Sure.");
  ASSERT_EQ(nemo.calls.size(), 2u);
  EXPECT_EQ(nemo.calls[0].name, "get_weather");
  EXPECT_EQ(ordered_json::parse(nemo.calls[0].arguments), ordered_json({{"city", "Oslo"}}));
  EXPECT_EQ(nemo.calls[1].name, "get_time");
  const ToolCallDelta small = ParseToolCalls(
      ToolCallSyntax::kMistralArgs,
      R"([TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}[TOOL_CALLS]get_time[ARGS]{"timezone": "X"})");
  EXPECT_EQ(small.content, "");
  ASSERT_EQ(small.calls.size(), 2u);
  EXPECT_EQ(small.calls[0].name, "get_weather");
  EXPECT_EQ(ordered_json::parse(small.calls[1].arguments), ordered_json({{"timezone", "X"}}));
  for (const auto& [syntax, text] :
       {std::pair{ToolCallSyntax::kMistralJson, std::string("[TOOL_CALLS] no list")},
        std::pair{ToolCallSyntax::kMistralJson, std::string(R"([TOOL_CALLS][{"name": "f"}])")},
        std::pair{ToolCallSyntax::kMistralJson, std::string("[TOOL_CALLS][]")},
        std::pair{ToolCallSyntax::kMistralArgs, std::string(R"([TOOL_CALLS][ARGS]{"a": 1})")},
        std::pair{ToolCallSyntax::kMistralArgs, std::string("[TOOL_CALLS]f g[ARGS]{}")},
        std::pair{ToolCallSyntax::kMistralArgs, std::string("[TOOL_CALLS]f[ARGS][1]")}}) {
    const ToolCallDelta parsed = ParseToolCalls(syntax, text);
    EXPECT_TRUE(parsed.calls.empty()) << text;
    EXPECT_EQ(parsed.content, text);
  }
}

// Every split of the text into pieces of `piece` bytes releases what the whole parse gives.
TEST(ToolCallStream, ReleasesWhatTheWholeParseGivesHoweverSplit) {
  const std::string hermes = std::string("Checking.  \n") + kHermesCall + "\nthen <tool more\n" +
                             kHermesCall + "\n  Done. \n";
  const std::string mistral =
      R"(Checking. [TOOL_CALLS]get_weather[ARGS]{"city": "Rome"} then [TOOL_ more)"
      R"([TOOL_CALLS]get_time[ARGS] {"timezone": "X"} Done.)";
  for (const auto& [syntax, text] : {std::pair{ToolCallSyntax::kHermes, hermes},
                                     std::pair{ToolCallSyntax::kMistralArgs, mistral}}) {
    const ToolCallDelta whole = ParseToolCalls(syntax, text);
    ASSERT_EQ(whole.calls.size(), 2u);
    for (size_t piece = 1; piece <= text.size(); ++piece) {
      ToolCallStream stream(syntax);
      std::string content;
      std::vector<ParsedToolCall> calls;
      for (size_t at = 0; at < text.size(); at += piece) {
        ToolCallDelta delta = stream.Add(std::string_view(text).substr(at, piece));
        content += delta.content;
        for (ParsedToolCall& call : delta.calls) calls.push_back(std::move(call));
      }
      content += stream.Finish().content;
      EXPECT_EQ(content, whole.content) << "pieces of " << piece;
      ASSERT_EQ(calls.size(), whole.calls.size()) << "pieces of " << piece;
      for (size_t k = 0; k < calls.size(); ++k) {
        EXPECT_EQ(calls[k].name, whole.calls[k].name);
        EXPECT_EQ(calls[k].arguments, whole.calls[k].arguments);
      }
    }
  }
}

TEST(ToolCallStream, KeepsHermesContentAroundCalls) {
  const std::string text = std::string("Checking.  \n") + kHermesCall + "\nthen <tool more\n" +
                           kHermesCall + "\n  Done. \n";
  EXPECT_EQ(ParseToolCalls(ToolCallSyntax::kHermes, text).content,
            "Checking.  \n\nthen <tool more\n\n  Done.");
}

TEST(FallbackToolTurns, WritesEarlierCallsAndResultsAsText) {
  const ordered_json turns = FallbackToolTurns(ordered_json::parse(R"([
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "18 C"}])"));
  EXPECT_EQ(turns[1]["content"],
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
            "{\"city\":\"Paris\"}}\n</tool_call>");
  EXPECT_FALSE(turns[1].contains("tool_calls"));
  EXPECT_EQ(turns[2], ordered_json({{"role", "user"},
                                    {"content", "<tool_response>\n18 C\n</tool_response>"}}));
}

class ToolCallConstraintTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = BundledTokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    compiler_ = new GrammarCompiler(*tokenizer_, int64_t{64} << 20, int64_t{64} << 10);
  }

  // Whether the constraint accepts `text` token by token and may end after it.
  static bool Accepts(const OutputConstraint& constraint, const std::string& text) {
    auto compiled = compiler_->Compile(constraint);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    if (!compiled.ok()) return false;
    TokenMatcher matcher(*compiled);
    auto ids = tokenizer_->Encode(text, /*parse_special=*/false);
    EXPECT_TRUE(ids.ok());
    for (int32_t id : *ids) {
      if (!matcher.Accept(id)) return false;
    }
    return matcher.Accept(tokenizer_->eos_id()) && matcher.terminated();
  }

  static const Tokenizer* tokenizer_;
  static GrammarCompiler* compiler_;
};

const Tokenizer* ToolCallConstraintTest::tokenizer_ = nullptr;
GrammarCompiler* ToolCallConstraintTest::compiler_ = nullptr;

TEST_F(ToolCallConstraintTest, RequiredTakesCallsOnly) {
  ToolChoice required{ToolChoiceMode::kRequired, "", /*parallel=*/true};
  const OutputConstraint c = ToolCallConstraint(ToolCallSyntax::kHermes, Tools(), required);
  EXPECT_EQ(c.kind, OutputConstraint::Kind::kStructuralTag);
  EXPECT_TRUE(Accepts(c, kHermesCall));
  EXPECT_TRUE(Accepts(c, std::string(kHermesCall) + "\n" + kHermesCall));
  EXPECT_FALSE(Accepts(c, "It is sunny."));
  EXPECT_FALSE(Accepts(c,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n"
                       "</tool_call>"));  // city is required
  required.parallel = false;
  const OutputConstraint one = ToolCallConstraint(ToolCallSyntax::kHermes, Tools(), required);
  EXPECT_FALSE(Accepts(one, std::string(kHermesCall) + "\n" + kHermesCall));
}

TEST_F(ToolCallConstraintTest, NamedTakesThatFunctionOnly) {
  const ToolChoice named{ToolChoiceMode::kNamed, "get_time", true};
  const OutputConstraint c = ToolCallConstraint(ToolCallSyntax::kHermes, Tools(), named);
  EXPECT_FALSE(Accepts(c, kHermesCall));
  EXPECT_TRUE(Accepts(c,
                      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
                      "{\"timezone\": \"UTC\"}}\n</tool_call>"));
}

TEST_F(ToolCallConstraintTest, AutoTakesTextAndCalls) {
  const ToolChoice automatic{ToolChoiceMode::kAuto, "", true};
  const OutputConstraint c = ToolCallConstraint(ToolCallSyntax::kHermes, Tools(), automatic);
  EXPECT_TRUE(Accepts(c, "It is sunny."));
  EXPECT_TRUE(Accepts(c, std::string("Let me check.\n") + kHermesCall));
  EXPECT_FALSE(
      Accepts(c, "<tool_call>\n{\"name\": \"get_news\", \"arguments\": {}}\n</tool_call>"));
  const OutputConstraint llama =
      ToolCallConstraint(ToolCallSyntax::kLlama3Json, Tools(), automatic);
  EXPECT_TRUE(Accepts(llama, R"({"name": "get_weather", "parameters": {"city": "Rome"}})"));
}

// Mistral's calls, one per [TOOL_CALLS], back to back.
TEST_F(ToolCallConstraintTest, MistralSyntaxes) {
  const ToolChoice required{ToolChoiceMode::kRequired, "", true};
  const OutputConstraint nemo = ToolCallConstraint(ToolCallSyntax::kMistralJson, Tools(), required);
  const std::string nemo_call =
      R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}])";
  EXPECT_TRUE(Accepts(nemo, nemo_call));
  EXPECT_TRUE(Accepts(nemo, nemo_call + nemo_call));
  EXPECT_FALSE(Accepts(nemo, "It is sunny."));
  const OutputConstraint small =
      ToolCallConstraint(ToolCallSyntax::kMistralArgs, Tools(), required);
  EXPECT_TRUE(Accepts(small, R"([TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"})"));
  EXPECT_FALSE(Accepts(small, R"([TOOL_CALLS]get_news[ARGS]{"city": "Oslo"})"));
  const ToolChoice automatic{ToolChoiceMode::kAuto, "", true};
  EXPECT_TRUE(Accepts(ToolCallConstraint(ToolCallSyntax::kMistralArgs, Tools(), automatic),
                      R"(Let me see. [TOOL_CALLS]get_time[ARGS]{"timezone": "UTC"})"));
}

}  // namespace
}  // namespace tpserve
