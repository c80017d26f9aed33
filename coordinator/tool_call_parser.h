// The calls in a chat reply, in the family's syntax (coordinator/tool_calls.h): the text outside
// the calls is the message's content, leading and trailing whitespace dropped; a call that does
// not parse stays text. ToolCallStream does it as the text arrives, holding back what may still
// become a call (a possible start of one, an unfinished one) and trailing whitespace, so that
// what it releases adds up to what ParseToolCalls gives for the whole text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "coordinator/tool_calls.h"

namespace tpserve {

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object
};

struct ToolCallDelta {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallSyntax syntax);

  // What `text`, following everything added before, releases.
  ToolCallDelta Add(std::string_view text);
  // The end of the reply: what was held back, as content (whitespace at the end dropped).
  ToolCallDelta Finish();

 private:
  // Where the calls starting at buffer_[0] end (the index after them), with the calls (one, or a
  // Mistral list's); 0 when more text is needed; std::string::npos when it is not a call.
  size_t ParseCalls(std::vector<ParsedToolCall>* calls) const;
  void Release(std::string_view text, ToolCallDelta* out);

  ToolCallSyntax syntax_;
  std::string trigger_;
  std::string buffer_;      // text not yet released
  std::string held_space_;  // whitespace released only if text follows it
  bool content_started_ = false;
};

// The whole reply at once.
ToolCallDelta ParseToolCalls(ToolCallSyntax syntax, std::string_view text);

}  // namespace tpserve
