#include "coordinator/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "coordinator/openai_constraint.h"
#include "coordinator/openai_error.h"
#include "coordinator/openai_fields.h"
#include "coordinator/schema_keywords.h"
#include "coordinator/tool_calls.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr int64_t kDefaultCompletionMaxTokens = 16;  // OpenAI's default for /v1/completions

// The float sampling parameters OpenAI (or vLLM) names, each read into its SamplingParams field;
// absent ones keep the served model's defaults, and SamplingParams::Validate judges the ranges.
struct FloatField {
  const char* name;
  float SamplingParams::*field;
};
constexpr FloatField kFloatFields[] = {
    {"temperature", &SamplingParams::temperature},
    {"top_p", &SamplingParams::top_p},
    {"min_p", &SamplingParams::min_p},
    {"repetition_penalty", &SamplingParams::repetition_penalty},
    {"presence_penalty", &SamplingParams::presence_penalty},
    {"frequency_penalty", &SamplingParams::frequency_penalty},
};

absl::Status GetSampling(const json& body, SamplingParams* s) {
  for (const FloatField& field : kFloatFields) {
    const json* value = Find(body, field.name);
    if (value == nullptr) continue;
    if (!value->is_number()) return WrongType(field.name, "a number", *value);
    s->*field.field = static_cast<float>(value->get<double>());
  }
  ASSIGN_OR_RETURN(const std::optional<int64_t> top_k, GetInt(body, "top_k"));
  if (top_k.has_value()) {
    if (*top_k < std::numeric_limits<int32_t>::min() ||
        *top_k > std::numeric_limits<int32_t>::max()) {
      return InvalidField("top_k", absl::StrCat(*top_k, " is out of range"));
    }
    s->top_k = *top_k == -1 ? 0 : static_cast<int32_t>(*top_k);  // vLLM's -1 and our 0: off
  }
  if (const json* seed = Find(body, "seed")) {
    if (seed->is_number_unsigned()) {
      s->seed = seed->get<uint64_t>();
    } else {
      ASSIGN_OR_RETURN(const int64_t value, AsInt(*seed, "seed"));
      s->seed = static_cast<uint64_t>(value);
    }
  } else {
    s->seed = RandomSamplingSeed();
  }
  if (auto error = s->FirstInvalidField()) return WithParam(s->Validate(), error->field);
  return absl::OkStatus();
}


// The value of `name`, or null when it is absent or JSON null: OpenAI clients send null for
// "not given".

absl::Status CheckModel(const json& body, const ServedModel& model) {
  const json* name = Find(body, "model");
  if (name == nullptr) return absl::OkStatus();
  if (!name->is_string()) return WrongType("model", "a string", *name);
  if (name->get_ref<const std::string&>() != model.name) {
    return ModelNotFound(name->get_ref<const std::string&>());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> GetStop(const json& body, const RequestLimits& limits) {
  const json* stop = Find(body, "stop");
  std::vector<std::string> result;
  if (stop == nullptr) return result;
  if (stop->is_string()) {
    if (stop->get_ref<const std::string&>().empty()) {
      return InvalidField("stop", "must not be empty");
    }
    result.push_back(stop->get<std::string>());
  } else if (!stop->is_array()) {
    return WrongType("stop", "a string or an array of strings", *stop);
  } else {
    for (size_t i = 0; i < stop->size(); ++i) {
      const json& s = (*stop)[i];
      if (!s.is_string()) return WrongType(absl::StrCat("stop[", i, "]"), "a string", s);
      result.push_back(s.get<std::string>());
    }
  }
  RETURN_IF_ERROR(CheckStopStrings(result, limits));
  return result;
}

// Token ids from a JSON array, each checked against the vocabulary.
absl::StatusOr<std::vector<int32_t>> GetTokenIds(const json& ids, absl::string_view param,
                                                 const Tokenizer& tokenizer) {
  if (!ids.is_array()) return WrongType(param, "an array of token ids", ids);
  std::vector<int32_t> result;
  result.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string element = absl::StrCat(param, "[", i, "]");
    ASSIGN_OR_RETURN(const int64_t id, AsInt(ids[i], element));
    if (id < 0 || id >= tokenizer.vocab_size()) {
      return InvalidField(element, absl::StrCat("token ", id, " is outside the vocabulary [0, ",
                                                tokenizer.vocab_size(), ")"));
    }
    result.push_back(static_cast<int32_t>(id));
  }
  return result;
}

// EncodeBoundedPrompt, with an error that names the request field.
absl::StatusOr<std::vector<int32_t>> EncodePrompt(const std::string& text, absl::string_view param,
                                                  const ServedModel& model) {
  absl::StatusOr<std::vector<int32_t>> ids =
      EncodeBoundedPrompt(text, model.context_length, *model.tokenizer);
  if (!ids.ok()) return InvalidField(param, ids.status().message());
  return ids;
}

absl::StatusOr<std::vector<int32_t>> GetCompletionPrompt(const json& body,
                                                         const ServedModel& model) {
  const json* prompt = Find(body, "prompt");
  if (prompt == nullptr) return InvalidField("prompt", "is required");
  const json* one = prompt;
  std::string param = "prompt";
  // [[ids]] or ["text"]: a batch, of which one prompt is supported.
  if (prompt->is_array() && !prompt->empty() && !prompt->front().is_number()) {
    if (prompt->size() != 1) {
      return InvalidField("prompt", absl::StrCat("holds ", prompt->size(),
                                                 " prompts; send one prompt per request"));
    }
    one = &prompt->front();
    param = "prompt[0]";
  }
  if (one->is_string()) {
    return EncodePrompt(one->get_ref<const std::string&>(), param, model);
  }
  if (!one->is_array()) return WrongType(param, "a string or an array of token ids", *one);
  if (one->empty()) return InvalidField(param, "must not be empty");
  return GetTokenIds(*one, param, *model.tokenizer);
}

// An assistant message's tool_calls: [{"id"?, "type": "function", "function": {"name",
// "arguments"}}], arguments a JSON string (OpenAI) or an object.
absl::Status CheckToolCalls(const json& calls, const std::string& param) {
  if (!calls.is_array()) return WrongType(param, "an array", calls);
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string call_param = absl::StrCat(param, "[", i, "]");
    const json& call = calls[i];
    if (!call.is_object()) return WrongType(call_param, "an object", call);
    const json* function = Find(call, "function");
    if (function == nullptr) return InvalidField(call_param + ".function", "is required");
    if (!function->is_object()) return WrongType(call_param + ".function", "an object", *function);
    const json* function_name = Find(*function, "name");
    if (function_name == nullptr || !function_name->is_string()) {
      return InvalidField(call_param + ".function.name", "is required and must be a string");
    }
    const json* arguments = Find(*function, "arguments");
    if (arguments != nullptr && !arguments->is_string() && !arguments->is_object()) {
      return WrongType(call_param + ".function.arguments", "a string or an object", *arguments);
    }
    // The text is parsed again to render the turn: its depth is bounded like the body's.
    if (arguments != nullptr && arguments->is_string() &&
        JsonNestingDepth(arguments->get_ref<const std::string&>()) > kMaxJsonDepth) {
      return InvalidField(call_param + ".function.arguments",
                          absl::StrCat("nests JSON deeper than ", kMaxJsonDepth, " levels"));
    }
  }
  return absl::OkStatus();
}

// What a request's tools are and how they may be called.
struct RequestTools {
  ordered_json as_sent;  // OpenAI's array as sent, for the chat template; null when absent
  std::vector<ToolFunction> functions;
  ToolChoice choice;
};

// OpenAI's rule for function names.
bool IsToolName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// `tools` ([{"type": "function", "function": {"name", "description"?, "parameters"?}}]),
// `tool_choice` (none, auto, required, or {"type": "function", "function": {"name"}}; auto when
// there are tools, else none) and `parallel_tool_calls` (default true).
absl::StatusOr<RequestTools> GetTools(const json& body, const ordered_json& ordered_body,
                                      const RequestLimits& limits) {
  RequestTools out;
  if (const json* tools = Find(body, "tools")) {
    if (!tools->is_array()) return WrongType("tools", "an array", *tools);
    if (tools->size() > static_cast<size_t>(limits.max_tools)) {
      return InvalidField("tools", absl::StrCat("holds ", tools->size(), " tools; at most ",
                                                limits.max_tools, " are allowed (--max-tools)"));
    }
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string param = absl::StrCat("tools[", i, "]");
      const json& tool = (*tools)[i];
      if (!tool.is_object()) return WrongType(param, "an object", tool);
      if (tool.value("type", json()) != "function") {
        return InvalidField(param + ".type", "must be \"function\"");
      }
      const json* function = Find(tool, "function");
      if (function == nullptr || !function->is_object()) {
        return InvalidField(param + ".function", "is required and must be an object");
      }
      const json* name = Find(*function, "name");
      if (name == nullptr || !name->is_string()) {
        return InvalidField(param + ".function.name", "is required and must be a string");
      }
      ToolFunction parsed;
      parsed.name = name->get<std::string>();
      if (!IsToolName(parsed.name)) {
        return InvalidField(param + ".function.name",
                            "must be 1 to 64 letters, digits, underscores or dashes");
      }
      for (const ToolFunction& other : out.functions) {
        if (other.name == parsed.name) {
          return InvalidField(param + ".function.name", "names a function already offered");
        }
      }
      parsed.parameters = ordered_json{{"type", "object"}};
      if (const json* parameters = Find(*function, "parameters")) {
        const std::string parameters_param = param + ".function.parameters";
        if (!parameters->is_object()) return WrongType(parameters_param, "an object", *parameters);
        if (const std::string found = UnenforcedSchemaKeyword(*parameters); !found.empty()) {
          return InvalidField(parameters_param,
                              absl::StrCat("the schema's ", found, " is not supported"));
        }
        parsed.parameters = ordered_body["tools"][i]["function"]["parameters"];
      }
      out.functions.push_back(std::move(parsed));
    }
    out.as_sent = ordered_body["tools"];
  }
  out.choice.mode = out.functions.empty() ? ToolChoiceMode::kNone : ToolChoiceMode::kAuto;
  if (const json* choice = Find(body, "tool_choice")) {
    if (*choice == "none") {
      out.choice.mode = ToolChoiceMode::kNone;
    } else if (*choice == "auto") {
      // Without tools there is nothing to choose from: the model answers in text.
    } else if (*choice == "required") {
      out.choice.mode = ToolChoiceMode::kRequired;
    } else if (choice->is_object() && choice->value("type", json()) == "function") {
      const json* function = Find(*choice, "function");
      const json* name =
          function != nullptr && function->is_object() ? Find(*function, "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        return InvalidField("tool_choice.function.name", "is required and must be a string");
      }
      out.choice.mode = ToolChoiceMode::kNamed;
      out.choice.name = name->get<std::string>();
      const bool offered =
          std::any_of(out.functions.begin(), out.functions.end(),
                      [&](const ToolFunction& f) { return f.name == out.choice.name; });
      if (!offered) return InvalidField("tool_choice.function.name", "names no function in tools");
    } else {
      return InvalidField("tool_choice",
                          "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                          "\"function\": {\"name\": ...}}");
    }
    if (out.functions.empty() && (out.choice.mode == ToolChoiceMode::kRequired ||
                                  out.choice.mode == ToolChoiceMode::kNamed)) {
      return InvalidField("tool_choice", "calls a function, but the request has no tools");
    }
  }
  ASSIGN_OR_RETURN(const std::optional<bool> parallel, GetBool(body, "parallel_tool_calls"));
  out.choice.parallel = parallel.value_or(true);
  return out;
}

// `messages` with `text` in the system message: appended to the first message's when that is a
// system message with text, else a system message of its own before them.
ordered_json WithSystemText(ordered_json messages, const std::string& text) {
  if (!messages.empty() && messages[0]["role"] == "system" && messages[0]["content"].is_string()) {
    messages[0]["content"] = absl::StrCat(messages[0]["content"].get<std::string>(), "\n\n", text);
  } else {
    messages.insert(messages.begin(), ordered_json{{"role", "system"}, {"content", text}});
  }
  return messages;
}

// A message's content: a string, or text parts joined by newlines (as vLLM joins them).
absl::StatusOr<std::string> GetContent(const json& message, const std::string& param,
                                       bool may_be_null) {
  const json* content = Find(message, "content");
  if (content == nullptr) {
    if (may_be_null) return std::string();
    return InvalidField(param, "is required");
  }
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) return WrongType(param, "a string or an array of parts", *content);
  std::string text;
  for (size_t i = 0; i < content->size(); ++i) {
    const json& part = (*content)[i];
    const std::string part_param = absl::StrCat(param, "[", i, "]");
    if (!part.is_object()) return WrongType(part_param, "an object", part);
    const json* type = Find(part, "type");
    if (type == nullptr || *type != "text") {
      return InvalidField(absl::StrCat(part_param, ".type"), "only \"text\" parts are supported");
    }
    const json* part_text = Find(part, "text");
    if (part_text == nullptr) return InvalidField(absl::StrCat(part_param, ".text"), "is required");
    if (!part_text->is_string()) {
      return WrongType(absl::StrCat(part_param, ".text"), "a string", *part_text);
    }
    if (i > 0) text += "\n";
    text += part_text->get_ref<const std::string&>();
  }
  return text;
}

// The conversation as the chat template sees it: each message as the client sent it (key order
// kept, for templates that print tool calls as JSON), with `developer` renamed `system` and text
// parts joined into one string. An assistant turn that only calls tools keeps null content.
absl::StatusOr<ordered_json> GetMessages(const json& body, const ordered_json& ordered_body) {
  const json* messages = Find(body, "messages");
  if (messages == nullptr) return InvalidField("messages", "is required");
  if (!messages->is_array()) return WrongType("messages", "an array", *messages);
  if (messages->empty()) return InvalidField("messages", "must not be empty");
  ordered_json result = ordered_json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    const std::string param = absl::StrCat("messages[", i, "]");
    if (!message.is_object()) return WrongType(param, "an object", message);
    const std::string role_param = param + ".role";
    const json* role = Find(message, "role");
    if (role == nullptr) return InvalidField(role_param, "is required");
    if (!role->is_string()) return WrongType(role_param, "a string", *role);
    std::string name = role->get<std::string>();
    if (name == "developer") name = "system";  // OpenAI's newer name for the system role
    if (name != "system" && name != "user" && name != "assistant" && name != "tool") {
      return InvalidField(role_param, "must be one of system, developer, user, assistant, tool");
    }
    const json* tool_calls = Find(message, "tool_calls");
    if (tool_calls != nullptr) {
      if (name != "assistant") {
        return InvalidField(param + ".tool_calls", "is for assistant messages");
      }
      RETURN_IF_ERROR(CheckToolCalls(*tool_calls, param + ".tool_calls"));
    }
    for (const char* field : {"tool_call_id", "name"}) {
      const json* value = Find(message, field);
      if (value != nullptr && !value->is_string()) {
        return WrongType(absl::StrCat(param, ".", field), "a string", *value);
      }
    }
    ASSIGN_OR_RETURN(std::string content,
                     GetContent(message, param + ".content", name == "assistant"));
    ordered_json rendered = ordered_body["messages"][i];
    rendered["role"] = name;
    if (tool_calls != nullptr && Find(message, "content") == nullptr) {
      rendered["content"] = nullptr;
    } else {
      rendered["content"] = std::move(content);
    }
    result.push_back(std::move(rendered));
  }
  return result;
}



// The fields both endpoints share. `request->params.prompt` is set by the caller.
absl::Status ParseCommon(const json& body, absl::string_view text, const ServedModel& model,
                         OpenAiRequest* request) {
  RETURN_IF_ERROR(CheckModel(body, model));
  GenerateParams& params = request->params;

  ASSIGN_OR_RETURN(std::optional<bool> stream, GetBool(body, "stream"));
  request->stream = stream.value_or(false);
  if (const json* options = Find(body, "stream_options")) {
    if (!request->stream) {
      return InvalidField("stream_options", "is only allowed when stream is true");
    }
    if (!options->is_object()) return WrongType("stream_options", "an object", *options);
    const json* include_usage = Find(*options, "include_usage");
    if (include_usage != nullptr && !include_usage->is_boolean()) {
      return WrongType("stream_options.include_usage", "a boolean", *include_usage);
    }
    request->include_usage = include_usage != nullptr && include_usage->get<bool>();
  }

  params.sampling = model.default_sampling;
  RETURN_IF_ERROR(GetSampling(body, &params.sampling));

  ASSIGN_OR_RETURN(const int64_t n, GetIntIn(body, "n", 1, 1, model.limits.max_n));
  params.n = static_cast<int32_t>(n);
  ASSIGN_OR_RETURN(params.stop, GetStop(body, model.limits));
  if (const json* ids = Find(body, "stop_token_ids")) {
    if (ids->is_array() && ids->size() > static_cast<size_t>(model.limits.max_stop_token_ids)) {
      return InvalidField("stop_token_ids",
                          absl::StrCat("holds ", ids->size(), " ids; at most ",
                                       model.limits.max_stop_token_ids,
                                       " are allowed (--max-stop-token-ids)"));
    }
    ASSIGN_OR_RETURN(params.stop_token_ids, GetTokenIds(*ids, "stop_token_ids", *model.tokenizer));
  }
  ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, GetBool(body, "ignore_eos"));
  params.ignore_eos = ignore_eos.value_or(false);
  ASSIGN_OR_RETURN(std::optional<bool> speculate, GetBool(body, "speculative_decoding"));
  params.speculate = speculate.value_or(true);
  ASSIGN_OR_RETURN(params.constraint, GetConstraint(body, text));
  return RejectUnlessDefault(body, "logit_bias", IsEmpty);
}

absl::StatusOr<json> ParseObject(absl::string_view body) {
  if (JsonNestingDepth(StdView(body)) > kMaxJsonDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body nests JSON deeper than ", kMaxJsonDepth, " levels"));
  }
  json value;
  try {
    value = json::parse(body);
  } catch (const json::exception& e) {
    // Also what nlohmann reports for strings that are not UTF-8.
    return absl::InvalidArgumentError(
        absl::StrCat("the request body is not valid JSON: ", e.what()));
  }
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body must be a JSON object, not ", value.type_name()));
  }
  return value;
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseCompletionRequest(absl::string_view body,
                                                     const ServedModel& model) {
  ASSIGN_OR_RETURN(const json request_body, ParseObject(body));
  OpenAiRequest request;
  request.endpoint = OpenAiEndpoint::kCompletions;
  RETURN_IF_ERROR(ParseCommon(request_body, body, model, &request));
  ASSIGN_OR_RETURN(request.params.prompt, GetCompletionPrompt(request_body, model));
  ASSIGN_OR_RETURN(
      const int64_t max_tokens,
      GetIntIn(request_body, "max_tokens", kDefaultCompletionMaxTokens, 1, model.context_length));
  request.params.max_tokens = static_cast<int32_t>(max_tokens);
  ASSIGN_OR_RETURN(const int64_t logprobs, GetIntIn(request_body, "logprobs", -1, 0, kMaxLogprobs));
  request.params.logprobs = static_cast<int32_t>(logprobs);
  RETURN_IF_ERROR(RejectUnlessDefault(request_body, "echo", IsFalse));
  RETURN_IF_ERROR(RejectUnlessDefault(request_body, "suffix", IsEmpty));
  // best_of = n returns every sample, which is what n alone does.
  if (const json* best_of = Find(request_body, "best_of")) {
    if (*best_of != request.params.n) return InvalidField("best_of", "must equal n if set");
  }
  return request;
}

absl::StatusOr<OpenAiRequest> ParseChatRequest(absl::string_view body, const ServedModel& model) {
  ASSIGN_OR_RETURN(const json request_body, ParseObject(body));
  OpenAiRequest request;
  request.endpoint = OpenAiEndpoint::kChatCompletions;
  RETURN_IF_ERROR(ParseCommon(request_body, body, model, &request));
  // Parsed again with key order kept: templates print tools and tool calls as JSON.
  const ordered_json ordered_body = ParseBoundedJson<ordered_json>(StdView(body));
  ASSIGN_OR_RETURN(ordered_json messages, GetMessages(request_body, ordered_body));
  ASSIGN_OR_RETURN(const RequestTools request_tools, GetTools(request_body, ordered_body, model.limits));
  if (model.chat_template == nullptr) {
    return InvalidField("messages",
                        "this model has no chat template that tpserve supports; "
                        "use /v1/completions");
  }
  ordered_json tools = request_tools.as_sent;
  const bool may_call = request_tools.choice.mode != ToolChoiceMode::kNone;
  const ToolCallFormat format = DetectToolCallFormat(model.chat_template->source());
  if (!format.template_renders_tools) {
    messages = FallbackToolTurns(std::move(messages));
    if (may_call) messages = WithSystemText(std::move(messages), FallbackToolPrompt(tools));
    tools = nullptr;
  }
  if (may_call) {
    if (request.params.constraint.active()) {
      return InvalidField(request.params.constraint.param, "cannot be combined with tools");
    }
    request.params.constraint =
        ToolCallConstraint(format.syntax, request_tools.functions, request_tools.choice);
    request.tool_syntax = format.syntax;
  }
  ordered_json template_variables;
  if (const json* kwargs = Find(request_body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) return WrongType("chat_template_kwargs", "an object", *kwargs);
    template_variables = ordered_body["chat_template_kwargs"];
  }
  absl::StatusOr<std::string> text = model.chat_template->Apply(
      messages, tools, /*add_generation_prompt=*/true, template_variables);
  if (!text.ok()) return InvalidField("messages", text.status().message());
  ASSIGN_OR_RETURN(request.params.prompt, EncodePrompt(*text, "messages", model));
  // max_completion_tokens replaced max_tokens; 0 (unset) generates up to the context length.
  const char* max_field = Find(request_body, "max_completion_tokens") != nullptr
                              ? "max_completion_tokens"
                              : "max_tokens";
  ASSIGN_OR_RETURN(const int64_t max_tokens,
                   GetIntIn(request_body, max_field, 0, 1, model.context_length));
  request.params.max_tokens = static_cast<int32_t>(max_tokens);
  ASSIGN_OR_RETURN(std::optional<bool> logprobs, GetBool(request_body, "logprobs"));
  ASSIGN_OR_RETURN(std::optional<int64_t> top_logprobs, GetInt(request_body, "top_logprobs"));
  if (top_logprobs.has_value()) {
    if (!logprobs.value_or(false)) {
      return InvalidField("top_logprobs", "requires logprobs to be true");
    }
    if (*top_logprobs < 0 || *top_logprobs > kMaxLogprobs) {
      return InvalidField("top_logprobs",
                          absl::StrCat("must be in [0, ", kMaxLogprobs, "], got ", *top_logprobs));
    }
  }
  request.params.logprobs =
      logprobs.value_or(false) ? static_cast<int32_t>(top_logprobs.value_or(0)) : -1;
  RETURN_IF_ERROR(RejectUnlessDefault(request_body, "functions", IsEmpty));
  return request;
}

}  // namespace tpserve
