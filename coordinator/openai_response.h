// OpenAI-compatible response objects, shaped as the official `openai` Python package's types
// (Completion, ChatCompletion, ChatCompletionChunk) read them:
//
//   text_completion        choices[{index, text, logprobs, finish_reason}], usage
//   chat.completion        choices[{index, message{role, content, reasoning_content?,
//                          tool_calls?}, logprobs, finish_reason}], usage; content null when a
//                          reply is only calls
//   streaming              text_completion chunks, or chat.completion.chunk with delta {role}
//                          first, then {reasoning_content}, {content} and {tool_calls};
//                          finish_reason on a sample's last chunk ("tool_calls" when its reply
//                          called tools); with stream_options.include_usage a final chunk with
//                          choices [] and usage; then `data: [DONE]`.
//
// Logprobs: /v1/completions' legacy object {tokens, token_logprobs, top_logprobs (one dict per
// token, the chosen token included, as OpenAI does; null for an echoed prompt's first token, which
// has no log-probability), text_offset (code points from the start of the sample's text)}; chat's
// {content: [{token, logprob, bytes, top_logprobs}]}. A token's string is its decoded bytes; where
// those are not UTF-8 (a piece of a character) the string holds U+FFFD and `bytes` the real bytes.
// -inf log-probabilities become -9999 as in vLLM, since JSON has no infinity.
//
// Serialize with Dump(): strings may hold bytes that are not UTF-8.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "coordinator/openai_request.h"
#include "coordinator/request_handle.h"
#include "coordinator/tool_call_parser.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// What every object of one response shares.
struct ResponseHeader {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string id;       // "cmpl-<request id>" or "chatcmpl-<request id>"
  int64_t created = 0;  // unix seconds
  std::string model;    // the served model name
  // Tool-call ids of 9 letters and digits, which Mistral's templates demand of the calls a client
  // sends back; otherwise "call_<request>_<sample>_<n>".
  bool mistral_call_ids = false;
};
ResponseHeader MakeResponseHeader(OpenAiEndpoint endpoint, uint64_t request_id, std::string model,
                                  absl::Time now);

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
};

// One finished sample, for the non-streaming response.
struct ChoiceOutput {
  std::string text;                    // with tool calls: the text outside them
  std::vector<TokenLogprob> logprobs;  // one per generated token when the request asked
  FinishReason finish_reason = FinishReason::kStop;
  std::vector<ParsedToolCall> tool_calls;
  // vLLM's prompt_logprobs when the request sent it: [null, {"<id>": {logprob, rank,
  // decoded_token}} per later prompt token, the token itself and its alternatives].
  std::optional<std::vector<TokenLogprob>> prompt_logprobs;
  std::string reasoning;  // a reasoning model's thinking (coordinator/reasoning.h)
  std::string stop_string;  // the stop string that ended the sample, if one did
};

// The token strings of logprobs come from `tokenizer`. `with_logprobs`: the request asked for
// them (the choices' logprobs are objects, otherwise null). `with_reasoning`: chat messages carry
// reasoning_content (null when the model did not think).
class OpenAiResponder {
 public:
  OpenAiResponder(ResponseHeader header, const Tokenizer* tokenizer, bool with_logprobs,
                  bool with_reasoning = false)
      : header_(std::move(header)),
        tokenizer_(tokenizer),
        with_logprobs_(with_logprobs),
        with_reasoning_(with_reasoning) {}

  const ResponseHeader& header() const { return header_; }

  // text_completion or chat.completion; choice i is choices[i].
  nlohmann::json Response(const std::vector<ChoiceOutput>& choices, const Usage& usage) const;

  // Chat only: a sample's first chunk, delta {role: "assistant", content: ""}.
  nlohmann::json RoleChunk(int32_t index) const;
  // New text and tokens of sample `index`; `finish_reason` on its last chunk. `text_offset`:
  // the sample's text_offset so far (legacy logprobs), advanced past these tokens.
  // `called_tools`: the sample's reply called tools, so a "stop" is reported as "tool_calls".
  nlohmann::json DeltaChunk(int32_t index, const std::string& text,
                            absl::Span<const TokenLogprob> logprobs,
                            std::optional<FinishReason> finish_reason, int32_t* text_offset,
                            bool called_tools = false) const;
  // Chat only: thinking of sample `index`, as delta.reasoning_content.
  nlohmann::json ReasoningChunk(int32_t index, const std::string& reasoning) const;
  // Chat only: whole calls of sample `index`, numbered from `first` within its reply, as
  // delta.tool_calls [{index, id, type, function {name, arguments}}].
  nlohmann::json ToolCallsChunk(int32_t index, absl::Span<const ParsedToolCall> calls,
                                int32_t first) const;
  // The stream_options.include_usage chunk: choices [] and the usage of every sample.
  nlohmann::json UsageChunk(const Usage& usage) const;

 private:
  nlohmann::json Logprobs(absl::Span<const TokenLogprob> logprobs, int32_t* text_offset) const;
  nlohmann::json CompletionLogprobs(absl::Span<const TokenLogprob> logprobs,
                                    int32_t* text_offset) const;
  nlohmann::json ChatLogprobs(absl::Span<const TokenLogprob> logprobs) const;
  nlohmann::json PromptLogprobsJson(absl::Span<const TokenLogprob> logprobs) const;
  std::string TokenString(int32_t id) const;
  nlohmann::json Object(const char* object_type) const;
  // [{id, type, function}] of sample `index`'s calls numbered from `first`; with `numbered`, each
  // also has its index (what a streamed delta carries).
  nlohmann::json ToolCallsJson(int32_t index, absl::Span<const ParsedToolCall> calls, int32_t first,
                               bool numbered) const;

  const ResponseHeader header_;
  const Tokenizer* const tokenizer_;
  const bool with_logprobs_;
  const bool with_reasoning_;
};

// `value` as JSON text, with bytes that are not UTF-8 replaced by U+FFFD.
std::string Dump(const nlohmann::json& value);
// One server-sent event: "data: <json>\n\n".
std::string SseEvent(const nlohmann::json& value);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

}  // namespace tpserve
