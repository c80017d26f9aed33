// Splits a template into text and the tokens of its tags, applying whitespace control as
// Hugging Face's environment sets it up: trim_blocks (the newline after a block or comment tag
// goes), lstrip_blocks (spaces and tabs before a block or comment tag on its own line go),
// `-` strips all whitespace on that side, `+` keeps it; newlines are normalised to "\n" and one
// trailing newline of the source is dropped, as jinja2 does by default.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve::jinja {

struct Position {
  int line = 1;
  int column = 1;
};

struct Token {
  enum class Kind {
    kText,        // literal template text (already whitespace-controlled)
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,
    kString,  // `text` holds the unescaped value
    kInt,
    kFloat,
    kOperator,  // `text` holds it: "==", "(", "|", ...
    kEnd,
  };
  Kind kind;
  std::string text;
  Position position;
};

// INVALID_ARGUMENT naming the line and column of an unterminated tag, comment or string, or a
// character that starts no token.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace tpserve::jinja
