// The output constraint of an OpenAI request body: `response_format` (json_schema, json_object)
// or vLLM's `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar` and their
// `structured_outputs` forms; at most one of them.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/output_constraint.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// `body` keeps the order it was sent in (ordered_json): a schema keeps its properties in the
// order the client wrote them.
absl::StatusOr<OutputConstraint> GetConstraint(const nlohmann::ordered_json& body);

}  // namespace tpserve
