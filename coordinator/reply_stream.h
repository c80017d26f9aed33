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
  // `include_reasoning` false: the thinking is split out and dropped (include_reasoning).
  ReplyStream(ReasoningStart reasoning, std::optional<ToolCallSyntax> tools,
              bool include_reasoning = true);

  // What `text`, following everything before, releases; with `last` (the sample's end), also
  // what was held back.
  ReplyDelta Next(std::string_view text, bool last);

 private:
  ReplyDelta Add(std::string_view text);
  ReplyDelta Finish();
  void Content(std::string_view text, ReplyDelta* out);

  bool include_reasoning_;

  ReasoningStream reasoning_;
  std::optional<ToolCallStream> tools_;
};

}  // namespace tpserve
