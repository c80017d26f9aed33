#include "coordinator/tool_calls.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"

namespace tpserve {

using nlohmann::ordered_json;

ToolCallFormat DetectToolCallFormat(const std::string& chat_template_source) {
  ToolCallFormat format;
  if (absl::StrContains(chat_template_source, "<tool_call>")) {
    format.syntax = ToolCallSyntax::kHermes;
    format.template_renders_tools = absl::StrContains(chat_template_source, "tools");
  } else if (absl::StrContains(chat_template_source, "\"parameters\": dictionary of argument")) {
    format.syntax = ToolCallSyntax::kLlama3Json;
    format.template_renders_tools = true;
  } else if (absl::StrContains(chat_template_source, "[TOOL_CALLS]")) {
    format.syntax = absl::StrContains(chat_template_source, "[ARGS]")
                        ? ToolCallSyntax::kMistralArgs
                        : ToolCallSyntax::kMistralJson;
    format.template_renders_tools = absl::StrContains(chat_template_source, "[AVAILABLE_TOOLS]");
  }
  return format;
}

bool WantsMistralCallIds(std::optional<ToolCallSyntax> syntax) {
  return syntax == ToolCallSyntax::kMistralJson || syntax == ToolCallSyntax::kMistralArgs;
}

std::string MistralToolCallId(std::string_view unique) {
  constexpr std::string_view kDigits =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  uint64_t hash = 1469598103934665603ull;
  for (const char c : unique) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::string id(9, '0');
  for (char& c : id) {
    c = kDigits[hash % kDigits.size()];
    hash /= kDigits.size();
  }
  return id;
}

std::string ToolCallBegin(ToolCallSyntax syntax, const std::string& name) {
  const std::string quoted = ordered_json(name).dump();
  switch (syntax) {
    case ToolCallSyntax::kHermes:
      return absl::StrCat("<tool_call>\n{\"name\": ", quoted, ", \"arguments\": ");
    case ToolCallSyntax::kLlama3Json:
      return absl::StrCat("{\"name\": ", quoted, ", \"parameters\": ");
    case ToolCallSyntax::kMistralJson:
      return absl::StrCat("[TOOL_CALLS][{\"name\": ", quoted, ", \"arguments\": ");
    case ToolCallSyntax::kMistralArgs:
      return absl::StrCat("[TOOL_CALLS]", name, "[ARGS]");
  }
  return "";
}

std::string ToolCallEnd(ToolCallSyntax syntax) {
  switch (syntax) {
    case ToolCallSyntax::kHermes:
      return "}\n</tool_call>";
    case ToolCallSyntax::kLlama3Json:
      return "}";
    case ToolCallSyntax::kMistralJson:
      return "}]";
    case ToolCallSyntax::kMistralArgs:
      return "";  // the arguments object ends the call
  }
  return "";
}

std::string ToolCallTrigger(ToolCallSyntax syntax) {
  switch (syntax) {
    case ToolCallSyntax::kHermes:
      return "<tool_call>";
    case ToolCallSyntax::kLlama3Json:
      return "{\"name\": \"";
    case ToolCallSyntax::kMistralJson:
    case ToolCallSyntax::kMistralArgs:
      return "[TOOL_CALLS]";
  }
  return "";
}

std::string ToolCallSeparator(ToolCallSyntax syntax) {
  switch (syntax) {
    case ToolCallSyntax::kHermes:
      return "\n";
    case ToolCallSyntax::kLlama3Json:
      return "; ";
    case ToolCallSyntax::kMistralJson:
    case ToolCallSyntax::kMistralArgs:
      return "";  // each call opens with its own [TOOL_CALLS]
  }
  return "";
}

OutputConstraint ToolCallConstraint(ToolCallSyntax syntax, const std::vector<ToolFunction>& tools,
                                    const ToolChoice& choice) {
  auto tag = [syntax](const ToolFunction& tool) {
    return ordered_json{
        {"type", "tag"},
        {"begin", ToolCallBegin(syntax, tool.name)},
        // Whitespace between tokens is bounded as in response_format's compact JSON: a model
        // that keeps writing spaces cannot run a call to max_tokens.
        {"content",
         {{"type", "json_schema"}, {"json_schema", tool.parameters}, {"max_whitespace_cnt", 1}}},
        {"end", ToolCallEnd(syntax)},
    };
  };
  ordered_json tags = ordered_json::array();
  for (const ToolFunction& tool : tools) {
    if (choice.mode != ToolChoiceMode::kNamed || tool.name == choice.name)
      tags.push_back(tag(tool));
  }
  // Llama-3.1's template renders one call per assistant turn.
  const bool parallel = choice.parallel && syntax != ToolCallSyntax::kLlama3Json;
  ordered_json format;
  if (choice.mode == ToolChoiceMode::kAuto) {
    format = {{"type", "triggered_tags"},
              {"triggers", {ToolCallTrigger(syntax)}},
              {"tags", tags},
              {"at_least_one", false},
              {"stop_after_first", !parallel}};
  } else {
    format = {{"type", "tags_with_separator"},
              {"tags", tags},
              {"separator", ToolCallSeparator(syntax)},
              {"at_least_one", true},
              {"stop_after_first", choice.mode == ToolChoiceMode::kNamed || !parallel}};
  }
  OutputConstraint constraint;
  constraint.kind = OutputConstraint::Kind::kStructuralTag;
  constraint.spec = ordered_json{{"type", "structural_tag"}, {"format", format}}.dump();
  constraint.param = choice.mode == ToolChoiceMode::kAuto ? "tools" : "tool_choice";
  return constraint;
}

std::string FallbackToolPrompt(const ordered_json& tools) {
  std::string listed;
  for (const ordered_json& tool : tools) absl::StrAppend(&listed, tool.dump(), "\n");
  return absl::StrCat(
      "You may call functions to answer. The functions you can call, as JSON schemas:\n<tools>\n",
      listed,
      "</tools>\nTo call a function, reply with its name and arguments in this form, one block "
      "per call:\n<tool_call>\n{\"name\": \"the function's name\", \"arguments\": {\"argument "
      "name\": value}}\n</tool_call>");
}

ordered_json FallbackToolTurns(ordered_json messages) {
  for (ordered_json& message : messages) {
    if (message["role"] == "tool") {
      const ordered_json& content = message["content"];
      message = ordered_json{
          {"role", "user"},
          {"content",
           absl::StrCat("<tool_response>\n", content.is_string() ? content.get<std::string>() : "",
                        "\n</tool_response>")}};
      continue;
    }
    const auto calls = message.find("tool_calls");
    if (calls == message.end() || !calls->is_array()) continue;
    std::string text = message["content"].is_string() ? message["content"].get<std::string>() : "";
    for (const ordered_json& call : *calls) {
      // Checked by the request parser: an object with a string name.
      const ordered_json& function = call.at("function");
      const ordered_json arguments = function.value("arguments", ordered_json::object());
      // OpenAI sends the arguments as JSON text; written as the object the model would write.
      ordered_json object = arguments;
      if (arguments.is_string()) {
        object = ParseBoundedJson<ordered_json>(arguments.get<std::string>());
        if (object.is_discarded()) object = arguments;
      }
      if (!text.empty()) text += "\n";
      absl::StrAppend(
          &text, ToolCallBegin(ToolCallSyntax::kHermes, function.at("name").get<std::string>()),
          object.dump(), ToolCallEnd(ToolCallSyntax::kHermes));
    }
    message.erase("tool_calls");
    message["content"] = text;
  }
  return messages;
}

}  // namespace tpserve
