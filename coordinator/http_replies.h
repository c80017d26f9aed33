// The HTTP front end's reply bodies: OpenAI error objects and JSON documents.
#pragma once

#include "absl/status/status.h"
#include "coordinator/http_message.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// An OpenAI error body for `status`, with `Retry-After: 1` on 429 and 503.
HttpReply ErrorReply(const absl::Status& status, int http_status);
// The same with the HTTP status that `status`'s code maps to (HttpStatusOf).
HttpReply ErrorReply(const absl::Status& status);
HttpReply JsonReply(int status, const nlohmann::json& body);

}  // namespace tpserve
