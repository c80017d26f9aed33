#include "coordinator/reply_stream.h"

#include <utility>

namespace tpserve {

ReplyStream::ReplyStream(ReasoningStart reasoning, std::optional<ToolCallSyntax> tools)
    : reasoning_(reasoning) {
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

}  // namespace tpserve
