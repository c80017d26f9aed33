#include "coordinator/inference_wire.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "coordinator/openai_error.h"
#include "coordinator/tool_calls.h"

namespace tpserve {
namespace {

using ordered_json = nlohmann::ordered_json;

// A JSON text field of the request: its value, or INVALID_ARGUMENT naming it.
absl::StatusOr<ordered_json> JsonField(const std::string& text, const std::string& param) {
  ordered_json value = ParseBoundedJson<ordered_json>(text);
  if (value.is_discarded()) {
    return InvalidField(param, absl::StrCat("is not JSON nested at most ", kMaxJsonDepth, " deep"));
  }
  return value;
}

}  // namespace

SamplingParams FromProto(const v1::Sampling& s, SamplingParams p) {
  if (s.has_temperature()) p.temperature = s.temperature();
  if (s.has_top_k()) p.top_k = s.top_k();
  if (s.has_top_p()) p.top_p = s.top_p();
  if (s.has_min_p()) p.min_p = s.min_p();
  if (s.has_repetition_penalty()) p.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) p.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.frequency_penalty = s.frequency_penalty();
  p.seed = s.has_seed() ? s.seed() : RandomSamplingSeed();
  return p;
}

OutputConstraint FromProto(const v1::OutputConstraint& c) {
  OutputConstraint out;
  switch (c.kind_case()) {
    case v1::OutputConstraint::kJsonObject:
      if (c.json_object()) out.kind = OutputConstraint::Kind::kJson;
      out.param = "constraint.json_object";
      break;
    case v1::OutputConstraint::kJsonSchema:
      out.kind = OutputConstraint::Kind::kJsonSchema;
      out.spec = c.json_schema();
      out.param = "constraint.json_schema";
      break;
    case v1::OutputConstraint::kRegex:
      out.kind = OutputConstraint::Kind::kRegex;
      out.spec = c.regex();
      out.param = "constraint.regex";
      break;
    case v1::OutputConstraint::kChoice:
      out.kind = OutputConstraint::Kind::kChoice;
      out.choices.assign(c.choice().choices().begin(), c.choice().choices().end());
      out.param = "constraint.choice";
      break;
    case v1::OutputConstraint::kGrammar:
      out.kind = OutputConstraint::Kind::kGrammar;
      out.spec = c.grammar();
      out.param = "constraint.grammar";
      break;
    case v1::OutputConstraint::KIND_NOT_SET:
      break;
  }
  return out;
}

v1::GenerateResponse ToChunk(const StreamUpdate& update) {
  v1::GenerateResponse chunk;
  chunk.set_index(update.index);
  chunk.mutable_token_ids()->Add(update.token_ids.begin(), update.token_ids.end());
  chunk.set_text(update.text);
  for (const TokenLogprob& logprob : update.logprobs) {
    v1::TokenLogprob* out = chunk.add_logprobs();
    out->set_token_id(logprob.token_id);
    out->set_logprob(logprob.logprob);
    for (const auto& [id, value] : logprob.top) {
      v1::TokenLogprob::Alternative* alternative = out->add_top();
      alternative->set_token_id(id);
      alternative->set_logprob(value);
    }
  }
  if (update.done) {
    chunk.set_finish_reason(FinishReasonName(*update.finish_reason));
    chunk.mutable_usage()->set_prompt_tokens(update.prompt_tokens);
    chunk.mutable_usage()->set_completion_tokens(update.completion_tokens);
    chunk.mutable_usage()->set_cached_prompt_tokens(update.cached_prompt_tokens);
  }
  return chunk;
}

}  // namespace tpserve

namespace tpserve {

void SetChatReply(const ReplyDelta& delta, uint64_t request_id, int32_t* calls, bool mistral_ids,
                  v1::GenerateResponse* chunk) {
  chunk->set_text(delta.content);
  chunk->set_reasoning_text(delta.reasoning);
  for (const ParsedToolCall& call : delta.calls) {
    v1::ToolCall* out = chunk->add_tool_calls();
    const std::string id = absl::StrCat("call_", request_id, "_", chunk->index(), "_", (*calls)++);
    out->set_id(mistral_ids ? MistralToolCallId(id) : id);
    out->set_name(call.name);
    out->set_arguments(call.arguments);
  }
  if (*calls > 0 && chunk->finish_reason() == "stop") chunk->set_finish_reason("tool_calls");
}

absl::StatusOr<ordered_json> ChatBody(const v1::Chat& chat,
                                      const v1::OutputConstraint& constraint) {
  ordered_json messages = ordered_json::array();
  for (const v1::ChatMessage& m : chat.messages()) {
    ordered_json message = {{"role", m.role()}, {"content", m.content()}};
    if (m.tool_calls_size() > 0) {
      ordered_json calls = ordered_json::array();
      for (const v1::ToolCall& call : m.tool_calls()) {
        calls.push_back({{"id", call.id()},
                         {"type", "function"},
                         {"function", {{"name", call.name()}, {"arguments", call.arguments()}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id().empty()) message["tool_call_id"] = m.tool_call_id();
    messages.push_back(std::move(message));
  }
  ordered_json body = {{"messages", std::move(messages)}};
  if (chat.tools_size() > 0) {
    ordered_json tools = ordered_json::array();
    for (int i = 0; i < chat.tools_size(); ++i) {
      const v1::Tool& tool = chat.tools(i);
      ordered_json function = {{"name", tool.name()}};
      if (!tool.description().empty()) function["description"] = tool.description();
      if (tool.parameters().empty()) {
        function["parameters"] = {{"type", "object"}};
      } else {
        ASSIGN_OR_RETURN(
            function["parameters"],
            JsonField(tool.parameters(), absl::StrCat("chat.tools[", i, "].parameters")));
      }
      tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    body["tools"] = std::move(tools);
  }
  const std::string& choice = chat.tool_choice();
  if (choice == "auto" || choice == "none" || choice == "required") {
    body["tool_choice"] = choice;
  } else if (!choice.empty()) {
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice}}}};
  }
  if (chat.no_parallel_tool_calls()) body["parallel_tool_calls"] = false;
  if (!chat.template_kwargs().empty()) {
    ASSIGN_OR_RETURN(body["chat_template_kwargs"],
                     JsonField(chat.template_kwargs(), "chat.template_kwargs"));
  }
  if (chat.exclude_reasoning()) body["include_reasoning"] = false;
  if (chat.thinking_token_budget() < 0) {
    return InvalidField("chat.thinking_token_budget", "must not be negative");
  }
  if (chat.thinking_token_budget() > 0)
    body["thinking_token_budget"] = chat.thinking_token_budget();
  switch (constraint.kind_case()) {
    case v1::OutputConstraint::kJsonObject:
      if (constraint.json_object()) body["response_format"] = {{"type", "json_object"}};
      break;
    case v1::OutputConstraint::kJsonSchema: {
      ASSIGN_OR_RETURN(body["guided_json"],
                       JsonField(constraint.json_schema(), "constraint.json_schema"));
      break;
    }
    case v1::OutputConstraint::kRegex:
      body["guided_regex"] = constraint.regex();
      break;
    case v1::OutputConstraint::kChoice:
      body["guided_choice"] = ordered_json(std::vector<std::string>(
          constraint.choice().choices().begin(), constraint.choice().choices().end()));
      break;
    case v1::OutputConstraint::kGrammar:
      body["guided_grammar"] = constraint.grammar();
      break;
    case v1::OutputConstraint::KIND_NOT_SET:
      break;
  }
  return body;
}

}  // namespace tpserve
