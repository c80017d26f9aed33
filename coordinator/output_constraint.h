// What a request constrains its output to (structured output): a JSON value, one that a JSON
// schema accepts, a regex, one of a list of strings, or an EBNF grammar. Parsed by the front ends
// (openai_request.cc, inference_service.cc), compiled by coordinator/grammar.h.
#pragma once

#include <cstdint>
#include <optional>
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
  // A reasoning model's thinking comes first (coordinator/reasoning.h): the output opens with
  // `begin` ("" when the prompt opened it), thinks for at most `max_tokens` tokens (-1: no bound)
  // and closes with "</think>"; then `kind` applies (kNone: any text).
  struct Thinking {
    std::string begin;
    int32_t max_tokens = -1;
  };
  std::optional<Thinking> thinking;

  bool active() const { return kind != Kind::kNone || thinking.has_value(); }
};

}  // namespace tpserve
