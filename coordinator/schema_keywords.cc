#include "coordinator/schema_keywords.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

using json = nlohmann::ordered_json;

constexpr const char* kUnenforcedKeywords[] = {
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "multipleOf",
};
// The string formats xgrammar turns into patterns.
const absl::flat_hash_set<std::string>& KnownFormats() {
  static const auto* formats =
      new absl::flat_hash_set<std::string>{"date",         "date-time",    "duration",
                                           "email",        "hostname",     "ipv4",
                                           "ipv6",         "json-pointer", "relative-json-pointer",
                                           "time",         "uri",          "uri-reference",
                                           "uri-template", "uuid"};
  return *formats;
}

std::string UnenforcedKeyword(const json& schema, const std::string& path) {
  if (schema.is_array()) {
    for (size_t i = 0; i < schema.size(); ++i) {
      std::string found = UnenforcedKeyword(schema[i], absl::StrCat(path, "/", i));
      if (!found.empty()) return found;
    }
    return "";
  }
  if (!schema.is_object()) return "";
  for (const char* keyword : kUnenforcedKeywords) {
    if (schema.contains(keyword)) {
      return absl::StrCat("keyword \"", keyword, "\" at ", path.empty() ? "/" : path);
    }
  }
  if (const auto it = schema.find("format");
      it != schema.end() && it->is_string() && !KnownFormats().contains(it->get<std::string>())) {
    return absl::StrCat("format \"", it->get<std::string>(), "\" at ", path.empty() ? "/" : path);
  }
  for (const auto& [key, value] : schema.items()) {
    // Under "properties" and "$defs" the keys are names, not keywords: look one level deeper.
    const bool names =
        key == "properties" || key == "$defs" || key == "definitions" || key == "patternProperties";
    if (names && value.is_object()) {
      for (const auto& [name, sub] : value.items()) {
        std::string found = UnenforcedKeyword(sub, absl::StrCat(path, "/", key, "/", name));
        if (!found.empty()) return found;
      }
    } else if (value.is_object() || value.is_array()) {
      std::string found = UnenforcedKeyword(value, absl::StrCat(path, "/", key));
      if (!found.empty()) return found;
    }
  }
  return "";
}

}  // namespace

std::string UnenforcedSchemaKeyword(const json& schema) { return UnenforcedKeyword(schema, ""); }

}  // namespace tpserve
