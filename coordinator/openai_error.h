// Errors of the OpenAI-compatible HTTP API. Inside the coordinator they are absl::Status values
// that carry the offending request field (and an OpenAI error code) as payloads; at the HTTP edge
// they become a status code and OpenAI's error body:
//
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p", "code": null}}
//
// Status codes: INVALID_ARGUMENT 400, UNAUTHENTICATED 401, NOT_FOUND 404, RESOURCE_EXHAUSTED 429 (the caller adds
// `Retry-After`), UNAVAILABLE 503, anything else 500.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// INVALID_ARGUMENT "<param>: <message>" naming `param` (e.g. "messages[2].role").
absl::Status InvalidField(absl::string_view param, absl::string_view message);
// `status` with `param` attached (replacing any it had); OK stays OK.
absl::Status WithParam(absl::Status status, absl::string_view param);
// Whether `status` names a request field already.
bool HasParam(const absl::Status& status);
// NOT_FOUND for a model this server does not serve, with code "model_not_found".
absl::Status ModelNotFound(absl::string_view model);

// UNAUTHENTICATED (401) with code "invalid_api_key", as OpenAI answers a missing or wrong key.
absl::Status InvalidApiKey();

int HttpStatusOf(const absl::Status& status);
// OpenAI's error object for a non-OK status, serialized.
std::string ErrorBody(const absl::Status& status);

}  // namespace tpserve
