// One sample's generated text split into what a reply holds: the model's thinking (reasoning.h),
// the content, and the tool calls in it (tool_call_parser.h), as the text arrives. Thinking comes
// first and never holds calls; calls are parsed from the content.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/reasoning.h"
#include "coordinator/tool_call_parser.h"

namespace tpserve {

struct ReplyDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> calls;

  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

class ReplyStream {
 public:
  // `tools`: the syntax of calls to parse out of the content; none: content stays text.
  ReplyStream(ReasoningStart reasoning, std::optional<ToolCallSyntax> tools);

  ReplyDelta Add(std::string_view text);
  // The end of the sample: what was held back.
  ReplyDelta Finish();

 private:
  void Content(std::string_view text, ReplyDelta* out);

  ReasoningStream reasoning_;
  std::optional<ToolCallStream> tools_;
};

}  // namespace tpserve
