#include "coordinator/messages_request.h"

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
constexpr std::string_view kSameName[] = {"model",       "max_tokens", "stream",
                                          "temperature", "top_p",      "top_k"};
// Fields this translation reads itself.
constexpr std::string_view kTranslated[] = {
    "messages", "system",   "stop_sequences", "tools",         "tool_choice",
    "thinking", "metadata", "output_config",  "cache_control", "service_tier"};

absl::StatusOr<std::string> TextOf(const json& content, const std::string& param);

// A text block's text; any other block is refused.
absl::StatusOr<std::string> TextBlock(const json& block, const std::string& param) {
  if (!block.is_object()) return WrongType(param, "a content block object", block);
  const json* type = Find(block, "type");
  if (type == nullptr || *type != "text") {
    return InvalidField(param, "only text blocks are supported here");
  }
  const json* text = Find(block, "text");
  if (text == nullptr || !text->is_string()) {
    return InvalidField(absl::StrCat(param, ".text"), "must be a string");
  }
  return text->get<std::string>();
}

// A string, or text blocks joined with newlines.
absl::StatusOr<std::string> TextOf(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return WrongType(param, "a string or an array of text blocks", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    ASSIGN_OR_RETURN(const std::string part,
                     TextBlock(content[i], absl::StrCat(param, "[", i, "]")));
    if (i > 0) text += "\n";
    text += part;
  }
  return text;
}

// One Anthropic message as chat messages: tool results first (tool messages), then the turn.
absl::Status AddMessage(const json& message, const std::string& param, json* messages) {
  if (!message.is_object()) return WrongType(param, "an object", message);
  const json* role = Find(message, "role");
  if (role == nullptr || (*role != "user" && *role != "assistant")) {
    return InvalidField(absl::StrCat(param, ".role"), "must be \"user\" or \"assistant\"");
  }
  const json* content = Find(message, "content");
  if (content == nullptr) return InvalidField(absl::StrCat(param, ".content"), "is required");
  json turn = {{"role", *role}, {"content", ""}};
  if (content->is_string()) {
    turn["content"] = *content;
    messages->push_back(std::move(turn));
    return absl::OkStatus();
  }
  if (!content->is_array()) {
    return WrongType(absl::StrCat(param, ".content"), "a string or an array of blocks", *content);
  }
  std::string text;
  json calls = json::array();
  for (size_t i = 0; i < content->size(); ++i) {
    const std::string at = absl::StrCat(param, ".content[", i, "]");
    const json& block = (*content)[i];
    if (!block.is_object()) return WrongType(at, "a content block object", block);
    const json* type = Find(block, "type");
    const std::string kind = type != nullptr && type->is_string() ? type->get<std::string>() : "";
    if (kind == "text") {
      ASSIGN_OR_RETURN(const std::string part, TextBlock(block, at));
      if (!text.empty()) text += "\n";
      text += part;
    } else if (kind == "tool_use" && *role == "assistant") {
      const json* id = Find(block, "id");
      const json* name = Find(block, "name");
      const json* input = Find(block, "input");
      if (id == nullptr || !id->is_string() || name == nullptr || !name->is_string()) {
        return InvalidField(at, "a tool_use block needs a string id and name");
      }
      if (input != nullptr && !input->is_object())
        return WrongType(at + ".input", "an object", *input);
      calls.push_back({{"id", *id},
                       {"type", "function"},
                       {"function",
                        {{"name", *name},
                         {"arguments", input != nullptr ? input->dump() : std::string("{}")}}}});
    } else if (kind == "tool_result" && *role == "user") {
      const json* id = Find(block, "tool_use_id");
      if (id == nullptr || !id->is_string()) {
        return InvalidField(at + ".tool_use_id", "must be a string");
      }
      std::string result;
      if (const json* value = Find(block, "content")) {
        ASSIGN_OR_RETURN(result, TextOf(*value, at + ".content"));
      }
      if (const json* error = Find(block, "is_error"); error != nullptr && *error == true) {
        result = absl::StrCat("Error: ", result);
      }
      messages->push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
    } else if ((kind == "thinking" || kind == "redacted_thinking") && *role == "assistant") {
      continue;
    } else {
      return InvalidField(
          at, absl::StrCat("a ", kind.empty() ? "block without a type" : kind,
                           " block is not supported in a ", role->get<std::string>(), " message"));
    }
  }
  if (text.empty() && calls.empty()) return absl::OkStatus();  // only tool results
  turn["content"] = text;
  if (!calls.empty()) {
    if (text.empty()) turn["content"] = nullptr;
    turn["tool_calls"] = std::move(calls);
  }
  messages->push_back(std::move(turn));
  return absl::OkStatus();
}

// A custom tool {name, description, input_schema} as a chat function.
absl::StatusOr<json> CustomTool(const json& tool, const std::string& at) {
  if (const json* type = Find(tool, "type"); type != nullptr && *type != "custom") {
    return InvalidField(at + ".type", "only custom tools (name, input_schema) are supported");
  }
  for (const auto& [key, value] : tool.items()) {
    if (key != "type" && key != "name" && key != "description" && key != "input_schema" &&
        key != "cache_control" && !value.is_null()) {
      return InvalidField(absl::StrCat(at, ".", key), "is not supported by this server");
    }
  }
  json function = {{"name", tool.value("name", json())}};
  if (const json* description = Find(tool, "description")) function["description"] = *description;
  const json* schema = Find(tool, "input_schema");
  if (schema == nullptr) return InvalidField(at + ".input_schema", "is required");
  function["parameters"] = *schema;
  return function;
}

absl::Status AddTools(const json& body, json* chat) {
  RETURN_IF_ERROR(ConvertTools(body, CustomTool, chat));
  const json* choice = Find(body, "tool_choice");
  if (choice == nullptr) return absl::OkStatus();
  if (!choice->is_object()) return WrongType("tool_choice", "an object", *choice);
  const json* type = Find(*choice, "type");
  if (type == nullptr || !type->is_string()) return InvalidField("tool_choice.type", "is required");
  if (*type == "auto") {
    (*chat)["tool_choice"] = "auto";
  } else if (*type == "any") {
    (*chat)["tool_choice"] = "required";
  } else if (*type == "none") {
    (*chat)["tool_choice"] = "none";
  } else if (*type == "tool") {
    const json* name = Find(*choice, "name");
    if (name == nullptr || !name->is_string()) {
      return InvalidField("tool_choice.name", "must name the tool");
    }
    (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    return InvalidField("tool_choice.type", "must be auto, any, tool or none");
  }
  ASSIGN_OR_RETURN(const std::optional<bool> serial, GetBool(*choice, "disable_parallel_tool_use"));
  if (serial.value_or(false)) (*chat)["parallel_tool_calls"] = false;
  return absl::OkStatus();
}

absl::Status AddThinking(const json& body, json* chat) {
  const json* thinking = Find(body, "thinking");
  if (thinking == nullptr) return absl::OkStatus();
  if (!thinking->is_object()) return WrongType("thinking", "an object", *thinking);
  const json* type = Find(*thinking, "type");
  if (type != nullptr && *type == "enabled") {
    const json* budget = Find(*thinking, "budget_tokens");
    if (budget == nullptr) return InvalidField("thinking.budget_tokens", "is required");
    (*chat)["thinking_token_budget"] = *budget;
    return absl::OkStatus();
  }
  if (type != nullptr && *type == "disabled") {
    (*chat)["include_reasoning"] = false;
    (*chat)["chat_template_kwargs"] = {{"enable_thinking", false}};
    return absl::OkStatus();
  }
  return InvalidField("thinking.type", "must be enabled or disabled");
}

absl::Status AddOutputConfig(const json& body, json* chat) {
  const json* config = Find(body, "output_config");
  if (config == nullptr) return absl::OkStatus();
  if (!config->is_object()) return WrongType("output_config", "an object", *config);
  for (const auto& [key, value] : config->items()) {
    if (key != "format" && !value.is_null()) {
      return InvalidField(absl::StrCat("output_config.", key), "is not supported by this server");
    }
  }
  const json* format = Find(*config, "format");
  if (format == nullptr) return absl::OkStatus();
  const json* type = Find(*format, "type");
  const json* schema = Find(*format, "schema");
  if (!format->is_object() || type == nullptr || *type != "json_schema" || schema == nullptr) {
    return InvalidField("output_config.format", "must be {type: json_schema, schema}");
  }
  (*chat)["response_format"] = {{"type", "json_schema"},
                                {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<json> MessagesToChatBody(const json& body) {
  ASSIGN_OR_RETURN(json chat, CopyKnownFields(body, kSameName, kTranslated, "Messages API"));
  if (Find(body, "max_tokens") == nullptr) return InvalidField("max_tokens", "is required");
  // Prompt caching is automatic here (the prefix cache): cache_control asks for nothing more.
  if (const json* tier = Find(body, "service_tier");
      tier != nullptr && *tier != "auto" && *tier != "standard_only") {
    return InvalidField("service_tier", "must be auto or standard_only");
  }
  json messages = json::array();
  if (const json* system = Find(body, "system")) {
    ASSIGN_OR_RETURN(const std::string text, TextOf(*system, "system"));
    messages.push_back({{"role", "system"}, {"content", text}});
  }
  const json* turns = Find(body, "messages");
  if (turns == nullptr || !turns->is_array() || turns->empty()) {
    return InvalidField("messages", "must be a non-empty array");
  }
  for (size_t i = 0; i < turns->size(); ++i) {
    RETURN_IF_ERROR(AddMessage((*turns)[i], absl::StrCat("messages[", i, "]"), &messages));
  }
  chat["messages"] = std::move(messages);
  if (const json* stop = Find(body, "stop_sequences")) {
    if (!stop->is_array()) return WrongType("stop_sequences", "an array of strings", *stop);
    if (!stop->empty()) chat["stop"] = *stop;
  }
  if (const json* metadata = Find(body, "metadata")) {
    if (!metadata->is_object()) return WrongType("metadata", "an object", *metadata);
    for (const auto& [key, value] : metadata->items()) {
      if (key != "user_id") return InvalidField("metadata." + key, "is not supported");
      if (!value.is_null()) chat["user"] = value;
    }
  }
  RETURN_IF_ERROR(AddTools(body, &chat));
  RETURN_IF_ERROR(AddThinking(body, &chat));
  RETURN_IF_ERROR(AddOutputConfig(body, &chat));
  return chat;
}

}  // namespace tpserve
