// Every top-level field of vLLM's and OpenAI's completions and chat requests, and what tpserve does
// with it (the README's table): parsed and honoured by openai_request.cc, or refused with 400
// naming it whenever it asks for something other than its default. A key in neither list is
// nobody's field: it changes nothing, and the request's log line names it.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tpserve {

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

// INVALID_ARGUMENT naming the first field of `body` that asks for what this server does not do;
// otherwise the keys no API defines, for the log.
absl::StatusOr<std::vector<std::string>> CheckKnownFields(const nlohmann::ordered_json& body,
                                                          OpenAiEndpoint endpoint);

}  // namespace tpserve
