// The chat side of an OpenAI request body: `messages` as the chat template sees them, `tools`
// with `tool_choice` and `parallel_tool_calls`, and continue_final_message's cut of the rendered
// conversation. Errors name the field (INVALID_ARGUMENT with `param`).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/request_limits.h"
#include "coordinator/tool_calls.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// What a request's tools are and how they may be called.
struct RequestTools {
  nlohmann::ordered_json
      as_sent;  // OpenAI's array as sent, for the chat template; null when absent
  std::vector<ToolFunction> functions;
  ToolChoice choice;
};

// `tools` ([{"type": "function", "function": {"name", "description"?, "parameters"?}}], at most
// limits.max_tools), `tool_choice` (none, auto, required, or {"type": "function", "function":
// {"name"}}; auto when there are tools, else none) and `parallel_tool_calls` (default true).
absl::StatusOr<RequestTools> GetTools(const nlohmann::ordered_json& body,
                                      const RequestLimits& limits);

// The conversation as the chat template sees it: each message as the client sent it (key order
// kept, for templates that print tool calls as JSON), with `developer` renamed `system` and text
// parts joined into one string. An assistant turn that only calls tools keeps null content.
absl::StatusOr<nlohmann::ordered_json> GetMessages(const nlohmann::ordered_json& body);

// `messages` with `text` in the system message: appended to the first message's when that is a
// system message with text, else a system message of its own before them.
nlohmann::ordered_json WithSystemText(nlohmann::ordered_json messages, const std::string& text);

// continue_final_message: the rendered conversation cut right after the final message's content,
// so that the model goes on writing it (the template's end-of-turn after it is dropped).
absl::Status OpenFinalMessage(const nlohmann::ordered_json& messages, std::string* text);

}  // namespace tpserve
