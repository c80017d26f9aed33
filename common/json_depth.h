// How deeply a JSON text nests arrays and objects, found in one pass without parsing it, so
// that a body nested thousands deep is refused before a parser builds (and later tears down,
// recursively) a tree that deep.
#pragma once

#include <cstddef>
#include <string_view>

namespace tpserve {

// The deepest nesting of '[' and '{' outside strings (0 for a scalar). Counts only: a text
// that is not JSON gets a number too, and the parser says what is wrong with it.
size_t JsonNestingDepth(std::string_view text);

}  // namespace tpserve
