// The JSON-schema keywords xgrammar parses and then does not enforce (it only warns): requests
// that use them are refused by name, as vLLM refuses them, rather than letting a client believe
// its output obeys them. Shared by response_format (coordinator/grammar.cc) and tool parameters
// (coordinator/openai_request.cc).
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace tpserve {

// The first such keyword of `schema` (at any depth), as "keyword \"multipleOf\" at
// /properties/x" or "format \"color\" at /", or "" when there is none.
std::string UnenforcedSchemaKeyword(const nlohmann::ordered_json& schema);

}  // namespace tpserve
