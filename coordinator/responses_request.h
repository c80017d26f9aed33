// OpenAI's Responses API (/v1/responses) requests, translated into the chat request the engine
// path takes (ParseChatBody):
//
//   instructions                           a system message first (not carried to later turns)
//   input: a string                        one user message
//   input items: messages (user, system,   messages, their input_text / output_text parts joined
//   developer, assistant)
//   function_call, function_call_output    an assistant turn's tool_calls, tool messages
//   reasoning items                        dropped: templates drop earlier thinking
//   previous_response_id                   the stored conversation (ResponseStore) comes first
//   tools [{type: function, name, ...}]    tools; tool_choice auto / none / required / a function
//   text.format                            response_format (text, json_object, json_schema)
//   max_output_tokens, temperature, top_p, max_tokens and the rest under their chat names
//   parallel_tool_calls, stream, user,
//   safety_identifier
//   store (default true)                   the response is kept for previous_response_id and GET
//
// Anything else (built-in tools, images, files, background, conversations, reasoning effort,
// truncation auto, include, top_logprobs) is refused with 400 naming the field, as is a key the
// API does not define.
#pragma once

#include "absl/status/statusor.h"
#include "coordinator/response_store.h"
#include "nlohmann/json.hpp"

namespace tpserve {

struct ResponsesRequest {
  nlohmann::ordered_json chat;  // the chat body
  // The conversation before this response's output, without the instructions (what is stored).
  nlohmann::ordered_json messages;
  // What the response object repeats of the request: instructions, tools, tool_choice, text,
  // temperature, top_p, max_output_tokens, previous_response_id, store, metadata, ...
  nlohmann::ordered_json echo;
  bool store = true;
};

absl::StatusOr<ResponsesRequest> ResponsesToChatBody(const nlohmann::ordered_json& body,
                                                     ResponseStore& store);

}  // namespace tpserve
