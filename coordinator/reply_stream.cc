#include "coordinator/reply_stream.h"

#include <utility>

namespace tpserve {

ReplyStream::ReplyStream(ReasoningStart reasoning, std::optional<ToolCallSyntax> tools,
                         bool include_reasoning)
    : include_reasoning_(include_reasoning), reasoning_(reasoning) {
  if (tools.has_value()) tools_.emplace(*tools);
}

void ReplyStream::Content(std::string_view text, ReplyDelta* out) {
  if (!tools_.has_value()) {
    out->content.append(text);
    return;
  }
  ToolCallDelta delta = tools_->Add(text);
  out->content += delta.content;
  for (ParsedToolCall& call : delta.calls) out->calls.push_back(std::move(call));
}

ReplyDelta ReplyStream::Add(std::string_view text) {
  ReasoningDelta split = reasoning_.Add(text);
  ReplyDelta out;
  out.reasoning = std::move(split.reasoning);
  Content(split.content, &out);
  return out;
}

ReplyDelta ReplyStream::Finish() {
  ReasoningDelta split = reasoning_.Finish();
  ReplyDelta out;
  out.reasoning = std::move(split.reasoning);
  Content(split.content, &out);
  if (tools_.has_value()) out.content += tools_->Finish().content;
  return out;
}

ReplyDelta ReplyStream::Next(std::string_view text, bool last) {
  ReplyDelta out = Add(text);
  if (last) {
    ReplyDelta tail = Finish();
    out.reasoning += tail.reasoning;
    out.content += tail.content;
    for (ParsedToolCall& call : tail.calls) out.calls.push_back(std::move(call));
  }
  if (!include_reasoning_) out.reasoning.clear();
  return out;
}

}  // namespace tpserve
