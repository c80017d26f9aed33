// Anthropic's Messages API (/v1/messages) requests, translated into the chat request the engine
// path takes (ParseChatBody), so that both APIs render, constrain and sample alike:
//
//   system (a string or text blocks)           the first message, role system
//   messages[].content text blocks             content text (joined)
//   tool_use blocks (assistant)                tool_calls, their input as the arguments
//   tool_result blocks (user)                  tool messages, before the turn's text
//   thinking, redacted_thinking blocks         dropped: templates drop earlier thinking
//   max_tokens, stop_sequences, temperature,   max_tokens, stop, temperature, top_p, top_k
//   top_p, top_k
//   tools [{name, description, input_schema}]  tools (function), tool_choice auto / any / tool /
//   tool_choice                                none, disable_parallel_tool_use
//   thinking {type: enabled, budget_tokens}    thinking_token_budget (a reasoning model only)
//   thinking {type: disabled}                  no thinking shown; enable_thinking false for the
//                                              template
//   output_config.format (json_schema)         response_format json_schema
//   metadata.user_id                           user
//
// Anything else (images, documents, server tools, containers, MCP servers, other thinking modes,
// effort) is refused with 400 naming the field; so is a key the API does not define.
#pragma once

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tpserve {

absl::StatusOr<nlohmann::ordered_json> MessagesToChatBody(const nlohmann::ordered_json& body);

}  // namespace tpserve
