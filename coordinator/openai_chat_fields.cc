#include "coordinator/openai_chat_fields.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "coordinator/openai_error.h"
#include "coordinator/openai_fields.h"
#include "coordinator/schema_keywords.h"

namespace tpserve {
namespace {

using nlohmann::ordered_json;
using json = nlohmann::ordered_json;

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

// OpenAI's rule for function names.
bool IsToolName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
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

}  // namespace

absl::StatusOr<RequestTools> GetTools(const json& body, const RequestLimits& limits) {
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
        parsed.parameters = *parameters;
      }
      out.functions.push_back(std::move(parsed));
    }
    out.as_sent = *tools;
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

absl::StatusOr<ordered_json> GetMessages(const json& body) {
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
    ordered_json rendered = message;
    rendered["role"] = name;
    // A call's null content is "" to the template, as vLLM renders it: Qwen3's tests it with `in`.
    rendered["content"] = std::move(content);
    result.push_back(std::move(rendered));
  }
  return result;
}

ordered_json WithSystemText(ordered_json messages, const std::string& text) {
  if (!messages.empty() && messages[0]["role"] == "system" && messages[0]["content"].is_string()) {
    messages[0]["content"] = absl::StrCat(messages[0]["content"].get<std::string>(), "\n\n", text);
  } else {
    messages.insert(messages.begin(), ordered_json{{"role", "system"}, {"content", text}});
  }
  return messages;
}

absl::Status OpenFinalMessage(const ordered_json& messages, std::string* text) {
  const ordered_json& content = messages.back()["content"];
  const std::string final_text = content.is_string() ? content.get<std::string>() : "";
  const size_t at = final_text.empty() ? std::string::npos : text->rfind(final_text);
  if (at == std::string::npos) {
    return InvalidField("continue_final_message",
                        "the final message has no text the chat template writes out");
  }
  text->resize(at + final_text.size());
  return absl::OkStatus();
}

}  // namespace tpserve
