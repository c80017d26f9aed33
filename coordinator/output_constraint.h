// What a request constrains its output to (structured output): a JSON value, one that a JSON
// schema accepts, a regex, one of a list of strings, or an EBNF grammar. Parsed by the front ends
// (openai_request.cc, inference_service.cc), compiled by coordinator/grammar.h.
#pragma once

#include <string>
#include <vector>

namespace tpserve {

struct OutputConstraint {
  // kStructuralTag: xgrammar's structural tag (JSON text), which tool calling builds.
  enum class Kind { kNone, kJson, kJsonSchema, kRegex, kChoice, kGrammar, kStructuralTag };
  Kind kind = Kind::kNone;
  std::string spec;                  // the schema (JSON text), regex or grammar
  std::vector<std::string> choices;  // kChoice
  // The request field it came from, for errors ("response_format", "guided_regex", ...).
  std::string param;

  bool active() const { return kind != Kind::kNone; }
};

}  // namespace tpserve
