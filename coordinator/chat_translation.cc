#include "coordinator/chat_translation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/openai_error.h"
#include "coordinator/openai_fields.h"

namespace tpserve {

using json = nlohmann::ordered_json;

absl::StatusOr<json> CopyKnownFields(const json& body, absl::Span<const std::string_view> same_name,
                                     absl::Span<const std::string_view> translated,
                                     std::string_view api) {
  auto listed = [](const std::string& key, absl::Span<const std::string_view> names) {
    return std::find(names.begin(), names.end(), key) != names.end();
  };
  json chat = json::object();
  for (const auto& [key, value] : body.items()) {
    if (listed(key, same_name)) {
      chat[key] = value;
    } else if (!listed(key, translated) && !value.is_null()) {
      return InvalidField(
          key, absl::StrCat("is not a ", std::string(api), " field this server supports"));
    }
  }
  return chat;
}

absl::Status ConvertTools(
    const json& body,
    absl::FunctionRef<absl::StatusOr<json>(const json& tool, const std::string& param)> convert,
    json* chat) {
  const json* tools = Find(body, "tools");
  if (tools == nullptr) return absl::OkStatus();
  if (!tools->is_array()) return WrongType("tools", "an array", *tools);
  json functions = json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string at = absl::StrCat("tools[", i, "]");
    const json& tool = (*tools)[i];
    if (!tool.is_object()) return WrongType(at, "an object", tool);
    ASSIGN_OR_RETURN(json function, convert(tool, at));
    functions.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  (*chat)["tools"] = std::move(functions);
  return absl::OkStatus();
}

}  // namespace tpserve
