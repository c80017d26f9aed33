#include "coordinator/responses_request.h"

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/chat_translation.h"
#include "coordinator/openai_error.h"
#include "coordinator/openai_fields.h"

namespace tpserve {
namespace {

using json = nlohmann::ordered_json;

// Fields copied to the chat body under the same name (the chat parser judges their values).
constexpr std::string_view kSameName[] = {"model",  "temperature",         "top_p",
                                          "stream", "parallel_tool_calls", "user"};
// Fields this translation reads itself.
constexpr std::string_view kTranslated[] = {"input",
                                            "instructions",
                                            "previous_response_id",
                                            "tools",
                                            "tool_choice",
                                            "text",
                                            "max_output_tokens",
                                            "store",
                                            "metadata",
                                            "safety_identifier",
                                            "truncation",
                                            "include",
                                            "background",
                                            "top_logprobs",
                                            "stream_options",
                                            "service_tier"};

// A message's content: a string, or input_text / output_text parts joined with newlines.
absl::StatusOr<std::string> ContentText(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return WrongType(param, "a string or an array of parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = absl::StrCat(param, "[", i, "]");
    const json& part = content[i];
    const json* type = part.is_object() ? Find(part, "type") : nullptr;
    const json* value = part.is_object() ? Find(part, "text") : nullptr;
    if (type == nullptr || (*type != "input_text" && *type != "output_text")) {
      return InvalidField(at, "only input_text and output_text parts are supported");
    }
    if (value == nullptr || !value->is_string())
      return InvalidField(at + ".text", "must be a string");
    if (i > 0) text += "\n";
    text += value->get<std::string>();
  }
  return text;
}

absl::Status AddItem(const json& item, const std::string& param, json* messages) {
  if (!item.is_object()) return WrongType(param, "an object", item);
  const json* type = Find(item, "type");
  const std::string kind =
      type != nullptr && type->is_string() ? type->get<std::string>() : std::string("message");
  if (kind == "message") {
    const json* role = Find(item, "role");
    if (role == nullptr ||
        (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer")) {
      return InvalidField(param + ".role", "must be user, assistant, system or developer");
    }
    const json* content = Find(item, "content");
    if (content == nullptr) return InvalidField(param + ".content", "is required");
    ASSIGN_OR_RETURN(const std::string text, ContentText(*content, param + ".content"));
    messages->push_back({{"role", *role}, {"content", text}});
    return absl::OkStatus();
  }
  if (kind == "function_call") {
    const json* call_id = Find(item, "call_id");
    const json* name = Find(item, "name");
    const json* arguments = Find(item, "arguments");
    if (call_id == nullptr || !call_id->is_string() || name == nullptr || !name->is_string() ||
        arguments == nullptr || !arguments->is_string()) {
      return InvalidField(param, "a function_call needs string call_id, name and arguments");
    }
    const json call = {{"id", *call_id},
                       {"type", "function"},
                       {"function", {{"name", *name}, {"arguments", *arguments}}}};
    // Calls that follow an assistant turn belong to it.
    if (!messages->empty() && messages->back()["role"] == "assistant") {
      json& turn = messages->back();
      if (!turn.contains("tool_calls")) turn["tool_calls"] = json::array();
      turn["tool_calls"].push_back(call);
    } else {
      messages->push_back(
          {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}});
    }
    return absl::OkStatus();
  }
  if (kind == "function_call_output") {
    const json* call_id = Find(item, "call_id");
    const json* output = Find(item, "output");
    if (call_id == nullptr || !call_id->is_string() || output == nullptr) {
      return InvalidField(param, "a function_call_output needs call_id and output");
    }
    ASSIGN_OR_RETURN(const std::string text, ContentText(*output, param + ".output"));
    messages->push_back({{"role", "tool"}, {"tool_call_id", *call_id}, {"content", text}});
    return absl::OkStatus();
  }
  if (kind == "reasoning") return absl::OkStatus();
  return InvalidField(param + ".type", absl::StrCat("input items of type ", kind,
                                                    " are not supported by this server"));
}

// A function tool {type: function, name, description, parameters, strict} as a chat function.
absl::StatusOr<json> FunctionTool(const json& tool, const std::string& at) {
  if (Find(tool, "type") == nullptr || tool["type"] != "function") {
    return InvalidField(at + ".type", "only function tools are supported");
  }
  json function = json::object();
  for (const auto& [key, value] : tool.items()) {
    if (key == "name" || key == "description" || key == "parameters" || key == "strict") {
      function[key] = value;
    } else if (key != "type" && !value.is_null()) {
      return InvalidField(absl::StrCat(at, ".", key), "is not supported by this server");
    }
  }
  return function;
}

absl::Status AddTools(const json& body, json* chat) {
  RETURN_IF_ERROR(ConvertTools(body, FunctionTool, chat));
  const json* choice = Find(body, "tool_choice");
  if (choice == nullptr) return absl::OkStatus();
  if (choice->is_string()) {
    (*chat)["tool_choice"] = *choice;
    return absl::OkStatus();
  }
  const json* type = choice->is_object() ? Find(*choice, "type") : nullptr;
  const json* name = choice->is_object() ? Find(*choice, "name") : nullptr;
  if (type == nullptr || *type != "function" || name == nullptr) {
    return InvalidField("tool_choice", "must be auto, none, required or {type: function, name}");
  }
  (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  return absl::OkStatus();
}

absl::Status AddTextFormat(const json& body, json* chat) {
  const json* text = Find(body, "text");
  if (text == nullptr) return absl::OkStatus();
  if (!text->is_object()) return WrongType("text", "an object", *text);
  for (const auto& [key, value] : text->items()) {
    if (key != "format" && !value.is_null()) {
      return InvalidField("text." + key, "is not supported by this server");
    }
  }
  const json* format = Find(*text, "format");
  if (format == nullptr) return absl::OkStatus();
  const json* type = format->is_object() ? Find(*format, "type") : nullptr;
  if (type == nullptr) return InvalidField("text.format.type", "is required");
  if (*type == "text") return absl::OkStatus();
  if (*type == "json_object") {
    (*chat)["response_format"] = {{"type", "json_object"}};
    return absl::OkStatus();
  }
  if (*type != "json_schema") {
    return InvalidField("text.format.type", "must be text, json_object or json_schema");
  }
  json schema = json::object();
  for (const auto& [key, value] : format->items()) {
    if (key != "type") schema[key] = value;
  }
  (*chat)["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  return absl::OkStatus();
}

// Fields accepted only at what this server does anyway.
absl::Status CheckDefaults(const json& body) {
  if (const json* v = Find(body, "truncation"); v != nullptr && *v != "disabled") {
    return InvalidField("truncation", "only \"disabled\" is supported");
  }
  if (const json* v = Find(body, "include"); v != nullptr && !(v->is_array() && v->empty())) {
    return InvalidField("include", "is not supported by this server");
  }
  if (const json* v = Find(body, "background"); v != nullptr && *v != false) {
    return InvalidField("background", "is not supported by this server");
  }
  if (const json* v = Find(body, "top_logprobs"); v != nullptr && *v != 0) {
    return InvalidField("top_logprobs", "is not supported by this server");
  }
  if (const json* v = Find(body, "service_tier"); v != nullptr && *v != "auto" && *v != "default") {
    return InvalidField("service_tier", "must be auto or default");
  }
  if (const json* v = Find(body, "stream_options")) {
    if (!v->is_object()) return WrongType("stream_options", "an object", *v);
    for (const auto& [key, value] : v->items()) {
      if (!value.is_null() && value != false) {
        return InvalidField("stream_options." + key, "is not supported by this server");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResponsesRequest> ResponsesToChatBody(const json& body, ResponseStore& store) {
  ResponsesRequest out;
  ASSIGN_OR_RETURN(out.chat, CopyKnownFields(body, kSameName, kTranslated, "Responses API"));
  RETURN_IF_ERROR(CheckDefaults(body));
  ASSIGN_OR_RETURN(const std::optional<bool> keep, GetBool(body, "store"));
  out.store = keep.value_or(true);
  if (const json* user = Find(body, "safety_identifier");
      user != nullptr && !out.chat.contains("user")) {
    out.chat["user"] = *user;
  }
  if (const json* max = Find(body, "max_output_tokens")) out.chat["max_tokens"] = *max;

  out.messages = json::array();
  const json* previous = Find(body, "previous_response_id");
  if (previous != nullptr) {
    if (!previous->is_string()) return WrongType("previous_response_id", "a string", *previous);
    std::optional<StoredResponse> stored = store.Get(previous->get<std::string>());
    if (!stored.has_value()) {
      return WithParam(absl::NotFoundError(absl::StrCat(
                           "previous_response_id: no stored response has this id (responses are "
                           "kept in memory while there is room, and only with store true)")),
                       "previous_response_id");
    }
    out.messages = std::move(stored->messages);
  }
  const json* input = Find(body, "input");
  if (input == nullptr) return InvalidField("input", "is required");
  if (input->is_string()) {
    out.messages.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) {
      RETURN_IF_ERROR(AddItem((*input)[i], absl::StrCat("input[", i, "]"), &out.messages));
    }
  } else {
    return WrongType("input", "a string or an array of items", *input);
  }
  json messages = json::array();
  const json* instructions = Find(body, "instructions");
  if (instructions != nullptr) {
    if (!instructions->is_string()) return WrongType("instructions", "a string", *instructions);
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  }
  for (const json& message : out.messages) messages.push_back(message);
  out.chat["messages"] = std::move(messages);
  RETURN_IF_ERROR(AddTools(body, &out.chat));
  RETURN_IF_ERROR(AddTextFormat(body, &out.chat));

  if (const json* metadata = Find(body, "metadata");
      metadata != nullptr && !metadata->is_object()) {
    return WrongType("metadata", "an object", *metadata);
  }
  auto echo = [&](const char* key, json fallback) {
    const json* value = Find(body, key);
    out.echo[key] = value != nullptr ? *value : std::move(fallback);
  };
  out.echo = json::object();
  echo("instructions", nullptr);
  echo("max_output_tokens", nullptr);
  echo("metadata", json::object());
  echo("parallel_tool_calls", true);
  echo("previous_response_id", nullptr);
  echo("temperature", nullptr);
  echo("tool_choice", "auto");
  echo("tools", json::array());
  echo("top_p", nullptr);
  echo("text", {{"format", {{"type", "text"}}}});
  echo("truncation", "disabled");
  echo("user", nullptr);
  out.echo["store"] = out.store;
  return out;
}

}  // namespace tpserve
