// JSON's bracket structure found in one pass without parsing: how deeply a text nests arrays and
// objects, so that a body nested thousands deep is refused before a parser builds (and later
// tears down, recursively) a tree that deep; and where a value that opens with a bracket closes,
// so that a JSON object can be cut out of text around it (tool calls in a model's reply).
#pragma once

#include <cstddef>
#include <string_view>

namespace tpserve {

// The deepest nesting of '[' and '{' outside strings (0 for a scalar). Counts only: a text
// that is not JSON gets a number too, and the parser says what is wrong with it.
size_t JsonNestingDepth(std::string_view text);

// The deepest JSON tpserve parses from a client or a model (request bodies, schemas, tool-call
// arguments): nlohmann's printer and copies recurse once per level.
inline constexpr size_t kMaxJsonDepth = 64;

// `text` as JSON (a nlohmann::json or ordered_json) when it nests at most `max_depth` deep,
// checked before the parser builds anything; a discarded value (is_discarded()) when it is not
// JSON or nests deeper. Every JSON text from a client or a model is parsed through here.
template <typename Json>
Json ParseBoundedJson(std::string_view text, size_t max_depth = kMaxJsonDepth) {
  if (JsonNestingDepth(text) > max_depth) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// The index just after the bracket that closes the one at text[start] ('{' or '['), outside
// strings; npos when it does not close within `text`.
size_t JsonValueEnd(std::string_view text, size_t start);

}  // namespace tpserve
