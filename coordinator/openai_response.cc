#include "coordinator/openai_response.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/tool_calls.h"

namespace tpserve {
namespace {

using nlohmann::json;

constexpr float kMinLogprob = -9999.0f;  // stands for -inf, which JSON cannot hold

float Finite(float logprob) { return std::isfinite(logprob) ? logprob : kMinLogprob; }

// Code points in `bytes`, counting each byte that does not continue a UTF-8 sequence.
int32_t CodePoints(const std::string& bytes) {
  int32_t n = 0;
  for (unsigned char c : bytes) n += (c & 0xC0) != 0x80;
  return n;
}

json Bytes(const std::string& s) {
  json bytes = json::array();
  for (unsigned char c : s) bytes.push_back(c);
  return bytes;
}

json UsageJson(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens}}}};
}

json FinishReasonJson(std::optional<FinishReason> reason, bool called_tools) {
  if (!reason.has_value()) return nullptr;
  if (called_tools && *reason == FinishReason::kStop) return "tool_calls";
  return FinishReasonName(*reason);
}

}  // namespace

ResponseHeader MakeResponseHeader(OpenAiEndpoint endpoint, uint64_t request_id, std::string model,
                                  absl::Time now) {
  ResponseHeader header;
  header.endpoint = endpoint;
  header.id =
      absl::StrCat(endpoint == OpenAiEndpoint::kCompletions ? "cmpl-" : "chatcmpl-", request_id);
  header.created = absl::ToUnixSeconds(now);
  header.model = std::move(model);
  return header;
}

std::string OpenAiResponder::TokenString(int32_t id) const {
  return std::string(tokenizer_->TokenBytes(id));
}

json OpenAiResponder::Object(const char* object_type) const {
  return {{"id", header_.id},
          {"object", object_type},
          {"created", header_.created},
          {"model", header_.model}};
}

json OpenAiResponder::CompletionLogprobs(absl::Span<const TokenLogprob> logprobs,
                                         int32_t* text_offset) const {
  json tokens = json::array();
  json token_logprobs = json::array();
  json top_logprobs = json::array();
  json text_offsets = json::array();
  for (const TokenLogprob& t : logprobs) {
    const std::string token = TokenString(t.token_id);
    tokens.push_back(token);
    text_offsets.push_back(*text_offset);
    *text_offset += CodePoints(token);
    if (std::isnan(t.logprob)) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(Finite(t.logprob));
    json top = json::object();
    for (const auto& [id, logprob] : t.top) top[TokenString(id)] = Finite(logprob);
    top[token] = Finite(t.logprob);
    top_logprobs.push_back(std::move(top));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offsets)}};
}

json OpenAiResponder::ChatLogprobs(absl::Span<const TokenLogprob> logprobs) const {
  json content = json::array();
  for (const TokenLogprob& t : logprobs) {
    json top = json::array();
    for (const auto& [id, logprob] : t.top) {
      const std::string token = TokenString(id);
      top.push_back({{"token", token}, {"logprob", Finite(logprob)}, {"bytes", Bytes(token)}});
    }
    const std::string token = TokenString(t.token_id);
    content.push_back({{"token", token},
                       {"logprob", Finite(t.logprob)},
                       {"bytes", Bytes(token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

json OpenAiResponder::Logprobs(absl::Span<const TokenLogprob> logprobs,
                               int32_t* text_offset) const {
  if (!with_logprobs_) return nullptr;
  if (header_.endpoint == OpenAiEndpoint::kCompletions) {
    return CompletionLogprobs(logprobs, text_offset);
  }
  return ChatLogprobs(logprobs);
}

json OpenAiResponder::PromptLogprobsJson(absl::Span<const TokenLogprob> logprobs) const {
  json list = json::array();
  for (const TokenLogprob& t : logprobs) {
    if (std::isnan(t.logprob)) {
      list.push_back(nullptr);
      continue;
    }
    json position = json::object();
    for (size_t j = 0; j < t.top.size(); ++j) {
      const auto& [id, logprob] = t.top[j];
      position[std::to_string(id)] = {{"logprob", Finite(logprob)},
                                      {"rank", j + 1},
                                      {"decoded_token", TokenString(id)}};
    }
    position[std::to_string(t.token_id)] = {
        {"logprob", Finite(t.logprob)}, {"rank", t.rank}, {"decoded_token", TokenString(t.token_id)}};
    list.push_back(std::move(position));
  }
  return list;
}

json OpenAiResponder::Response(const std::vector<ChoiceOutput>& choices, const Usage& usage) const {
  const bool chat = header_.endpoint == OpenAiEndpoint::kChatCompletions;
  json result = Object(chat ? "chat.completion" : "text_completion");
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    int32_t text_offset = 0;
    const bool called_tools = !c.tool_calls.empty();
    json choice = {{"index", i},
                   {"logprobs", Logprobs(c.logprobs, &text_offset)},
                   {"finish_reason", FinishReasonJson(c.finish_reason, called_tools)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (with_reasoning_) {
        choice["message"]["reasoning_content"] =
            c.reasoning.empty() ? json(nullptr) : json(c.reasoning);
      }
      if (called_tools) {
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] =
            ToolCallsJson(static_cast<int32_t>(i), c.tool_calls, 0, /*numbered=*/false);
      }
    } else {
      choice["text"] = c.text;
    }
    if (c.prompt_logprobs.has_value()) choice["prompt_logprobs"] = PromptLogprobsJson(*c.prompt_logprobs);
    list.push_back(std::move(choice));
  }
  result["choices"] = std::move(list);
  result["usage"] = UsageJson(usage);
  return result;
}

json OpenAiResponder::RoleChunk(int32_t index) const {
  json choice = {{"index", index},
                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  json chunk = Object("chat.completion.chunk");
  chunk["choices"] = json::array({std::move(choice)});
  return chunk;
}

json OpenAiResponder::DeltaChunk(int32_t index, const std::string& text,
                                 absl::Span<const TokenLogprob> logprobs,
                                 std::optional<FinishReason> finish_reason, int32_t* text_offset,
                                 bool called_tools) const {
  const bool chat = header_.endpoint == OpenAiEndpoint::kChatCompletions;
  json choice = {{"index", index},
                 {"logprobs", Logprobs(logprobs, text_offset)},
                 {"finish_reason", FinishReasonJson(finish_reason, called_tools)}};
  if (chat) {
    // The last chunk may carry no text: its delta is then empty, as OpenAI sends it.
    choice["delta"] = text.empty() ? json::object() : json{{"content", text}};
  } else {
    choice["text"] = text;
  }
  json chunk = Object(chat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = json::array({std::move(choice)});
  return chunk;
}

json OpenAiResponder::ReasoningChunk(int32_t index, const std::string& reasoning) const {
  json choice = {{"index", index},
                 {"delta", {{"reasoning_content", reasoning}}},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  json chunk = Object("chat.completion.chunk");
  chunk["choices"] = json::array({std::move(choice)});
  return chunk;
}

json OpenAiResponder::ToolCallsChunk(int32_t index, absl::Span<const ParsedToolCall> calls,
                                     int32_t first) const {
  json choice = {{"index", index},
                 {"delta", {{"tool_calls", ToolCallsJson(index, calls, first, /*numbered=*/true)}}},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  json chunk = Object("chat.completion.chunk");
  chunk["choices"] = json::array({std::move(choice)});
  return chunk;
}

json OpenAiResponder::ToolCallsJson(int32_t index, absl::Span<const ParsedToolCall> calls,
                                    int32_t first, bool numbered) const {
  // Unique within the response: the request's id, the sample and the call's place in its reply.
  const std::string prefix =
      absl::StrCat("call_", absl::StripPrefix(header_.id, "chatcmpl-"), "_", index, "_");
  json list = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const int32_t number = first + static_cast<int32_t>(k);
    std::string id = absl::StrCat(prefix, number);
    if (header_.mistral_call_ids) id = MistralToolCallId(id);
    json call = {{"id", std::move(id)},
                 {"type", "function"},
                 {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
    if (numbered) call["index"] = number;
    list.push_back(std::move(call));
  }
  return list;
}

json OpenAiResponder::UsageChunk(const Usage& usage) const {
  json chunk = Object(header_.endpoint == OpenAiEndpoint::kChatCompletions ? "chat.completion.chunk"
                                                                           : "text_completion");
  chunk["choices"] = json::array();
  chunk["usage"] = UsageJson(usage);
  return chunk;
}

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string SseEvent(const json& value) { return absl::StrCat("data: ", Dump(value), "\n\n"); }

}  // namespace tpserve
