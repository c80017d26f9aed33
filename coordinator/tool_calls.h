// OpenAI tool calling on chat requests: the functions a request offers, how its tool_choice
// constrains the output, and how the served family writes a call.
//
// Each family writes calls its own way, and its chat template says which:
//   Hermes (Qwen2/2.5/3, Hermes, and the fallback)
//       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   Llama-3.1 JSON             {"name": "f", "parameters": {...}}
//   Mistral JSON (Nemo)        [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
//   Mistral [ARGS] (Small 3.2, Devstral)
//                              [TOOL_CALLS]f[ARGS]{...}
// tpserve's own calls in the Mistral JSON syntax are one per [TOOL_CALLS] list; a list of several
// (as the model may write unconstrained) is parsed as as many calls.
// A template that does not render `tools` at all gets the tools described in a system message
// (FallbackToolPrompt) and the Hermes syntax.
//
// The output is constrained through xgrammar's structural tags, so that every call is well formed
// and its arguments match the function's parameters schema: with "auto" the model writes free
// text and a call starts when it writes the call's opening; "required" is only calls, one or more
// (one with parallel_tool_calls false, and always one in Llama-3.1's syntax, whose template renders
// one call per turn); a named function is exactly one call of it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/output_constraint.h"
#include "nlohmann/json.hpp"

namespace tpserve {

struct ToolFunction {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON schema of the arguments object
};

enum class ToolChoiceMode { kNone, kAuto, kRequired, kNamed };

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::kNone;
  std::string name;      // kNamed: the function to call
  bool parallel = true;  // parallel_tool_calls: more than one call in a reply
};

enum class ToolCallSyntax { kHermes, kLlama3Json, kMistralJson, kMistralArgs };

struct ToolCallFormat {
  ToolCallSyntax syntax = ToolCallSyntax::kHermes;
  bool template_renders_tools = false;  // false: FallbackToolPrompt describes them
};

// Whether calls in `syntax` go back to a Mistral template, which takes only ids of 9 letters and
// digits (MistralToolCallId).
bool WantsMistralCallIds(std::optional<ToolCallSyntax> syntax);
// `unique` (an id unique within the response) folded into 9 letters and digits: a 64-bit FNV-1a
// hash in base 62, so distinct calls of a response collide with odds of about 2^-53.
std::string MistralToolCallId(std::string_view unique);

// From the chat template's source: Hermes where it writes <tool_call>, Llama-3.1 JSON where it
// asks for {"name": ..., "parameters": ...}, Mistral's where it writes [TOOL_CALLS] (with [ARGS]
// after the name, or a JSON list); otherwise Hermes, with the tools described by
// FallbackToolPrompt unless the template renders `tools` itself.
ToolCallFormat DetectToolCallFormat(const std::string& chat_template_source);

// The opening and closing text of one call of `name` in `syntax`; the arguments object goes in
// between.
std::string ToolCallBegin(ToolCallSyntax syntax, const std::string& name);
std::string ToolCallEnd(ToolCallSyntax syntax);
// The text that starts every call (the structural tag's trigger).
std::string ToolCallTrigger(ToolCallSyntax syntax);
// What separates parallel calls.
std::string ToolCallSeparator(ToolCallSyntax syntax);

// The constraint for `choice` (mode auto, required or named) over `tools`: an xgrammar
// structural tag. `choice.name`, when named, is one of `tools`.
OutputConstraint ToolCallConstraint(ToolCallSyntax syntax, const std::vector<ToolFunction>& tools,
                                    const ToolChoice& choice);

// A system message describing `tools` (OpenAI's array as sent) and the Hermes call syntax, for
// templates that do not render tools.
std::string FallbackToolPrompt(const nlohmann::ordered_json& tools);
// The conversation for such a template: an assistant turn's tool_calls written into its content
// in the Hermes syntax, and each tool result a user turn in <tool_response> tags (as Hermes
// templates write them), so that a template that knows only text still shows earlier calls.
nlohmann::ordered_json FallbackToolTurns(nlohmann::ordered_json messages);

}  // namespace tpserve
