// Tokens → statement tree, with jinja2's grammar and operator precedence (lowest first):
// `x if c else y`, or, and, not, comparisons and `in` (chained), + -, ~, * / // %, **,
// unary - +, then postfix `.attr` `[i]` `[a:b:c]` `(args)`, `| filter` and `is test`.
// Statements: if/elif/else, for (target tuples, `if` filter, else), set (also namespace
// attributes and block set), macro, filter blocks, break/continue and Hugging Face's
// {% generation %}. Anything else (include, import, extends, call, recursive loops, filters and
// tests it does not know) is refused naming the construct and where it is.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/jinja/ast.h"

namespace tpserve::jinja {

// Nesting of blocks and expressions is bounded so that parsing and rendering cannot exhaust
// the stack; deeper templates are refused.
inline constexpr int kMaxNestingDepth = 128;

absl::StatusOr<Body> Parse(absl::string_view source);

}  // namespace tpserve::jinja
