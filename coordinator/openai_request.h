// OpenAI-compatible request bodies (/v1/completions, /v1/chat/completions) parsed and checked
// into the GenerateParams the engine takes. Every error is an absl::Status built by
// openai_error.h that names the offending field: `param` "top_p", "messages[1].content",
// "stop[3]"; unknown models are NOT_FOUND. Unknown fields are ignored (clients send extras such
// as `user`); fields whose behaviour is not implemented (`echo`, `suffix`, `logit_bias`,
// `functions`) are refused when set to anything but their default,
// rather than silently ignored.
//
// Accepted beyond OpenAI's fields, as vLLM accepts them: top_k (-1 or 0: off), min_p,
// repetition_penalty, ignore_eos, stop_token_ids; and speculative_decoding (false: this request
// decodes one token per step where the server speculates). `logprobs` of /v1/completions goes up to
// kMaxLogprobs (OpenAI: 5). A missing `model` means the served one. An unset `seed` gets a random
// one, so that a request is reproducible from the engine's log.
//
// Pure functions of the body and the served model: thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/lora_modules.h"
#include "coordinator/openai_known_fields.h"
#include "coordinator/reasoning.h"
#include "coordinator/request_limits.h"
#include "coordinator/sequence.h"
#include "coordinator/tool_calls.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// What request parsing needs to know about the model this server serves.
struct ServedModel {
  std::string name;  // what clients pass as "model"
  int64_t context_length = 0;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: chat requests are refused
  SamplingParams default_sampling;              // what a request's absent sampling fields take
  RequestLimits limits;
  // How the chat template's model calls tools (DetectToolCallFormat of its source, found once
  // when the template is loaded).
  ToolCallFormat tool_format;
  ReasoningParser reasoning = ReasoningParser::kNone;  // --reasoning-parser, resolved
  // --lora-modules: "model" may name one of these instead of the base model.
  std::vector<LoraModule> loras;
};

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  GenerateParams params;  // prompt tokenized (with BOS when the model wants it), defaults set
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a final chunk with usage
  // Chat with tools the model may call: the syntax its calls are parsed in.
  std::optional<ToolCallSyntax> tool_syntax;
  // Chat with a reasoning model: where its thinking starts, and whether the reply carries it
  // (include_reasoning).
  ReasoningStart reasoning = ReasoningStart::kNone;
  bool include_reasoning = true;
  // Completions' echo: each choice starts with the prompt as sent (token ids decoded), and, with
  // logprobs, with every prompt token's log-probability.
  bool echo = false;
  std::string echo_text;
  // -1: none. k >= 0: the prompt's log-probabilities are computed (PromptLogprobs) with k
  // alternatives, for echo or for vLLM's prompt_logprobs field, which each choice then carries
  // when `return_prompt_logprobs`.
  int32_t prompt_logprobs = -1;
  bool return_prompt_logprobs = false;
  // Top-level keys that no API defines: they change nothing, and the request's log line names them.
  std::vector<std::string> ignored_fields;

  // The field errors about the prompt name (e.g. the engine's "longer than the context").
  const char* prompt_field() const {
    return endpoint == OpenAiEndpoint::kCompletions ? "prompt" : "messages";
  }
};

// Defaults: max_tokens 16, n 1, sampling model.default_sampling. `prompt`: a string, an array of
// one string, an array of token ids, or an array of one such array.
absl::StatusOr<OpenAiRequest> ParseCompletionRequest(absl::string_view body,
                                                     const ServedModel& model);
// Defaults: max_completion_tokens (or max_tokens) up to the context length, n 1, sampling
// model.default_sampling. `messages`: [{role, content, tool_calls?, tool_call_id?, name?}] with
// roles system, developer (rendered as system), user, assistant and tool, content a string or an
// array of {"type": "text", "text": ...} parts (joined with newlines). The prompt is the model's
// chat template applied with the generation prompt to the messages, `tools` (OpenAI's array, as
// sent) and the members of `chat_template_kwargs`; what the template refuses is an error naming
// `messages`. With tools and a tool_choice other than none, the output is constrained to the
// family's call syntax (coordinator/tool_calls.h) and tool_syntax is set; a template that does
// not render tools gets them described in the system message instead. With a reasoning model
// (ServedModel::reasoning), the constraint applies after the thinking, which
// thinking_token_budget bounds.
absl::StatusOr<OpenAiRequest> ParseChatRequest(absl::string_view body, const ServedModel& model);
// The same, of a body parsed already (what the Messages and Responses APIs translate theirs into).
absl::StatusOr<OpenAiRequest> ParseChatBody(const nlohmann::ordered_json& body,
                                            const ServedModel& model);

// A request body as one JSON object, its key order kept, refused (INVALID_ARGUMENT) when it is
// not JSON, not an object, or nests deeper than kMaxJsonDepth before it is parsed.
absl::StatusOr<nlohmann::ordered_json> ParseJsonBody(absl::string_view body);

}  // namespace tpserve
