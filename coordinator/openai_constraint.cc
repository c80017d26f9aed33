#include "coordinator/openai_constraint.h"

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "coordinator/openai_error.h"
#include "coordinator/openai_fields.h"

namespace tpserve {
namespace {

using json = nlohmann::ordered_json;

// A JSON schema given as an object (or, as vLLM also takes it, as its text), printed with its
// keys in the order sent: a schema's property order is the order the output follows.
absl::StatusOr<std::string> SchemaText(const json& value, absl::string_view param) {
  if (value.is_object() || value.is_boolean()) return value.dump();
  if (value.is_string()) return value.get<std::string>();
  return WrongType(param, "a JSON schema object", value);
}

absl::StatusOr<std::string> StringField(const json& value, absl::string_view param) {
  if (!value.is_string()) return WrongType(param, "a string", value);
  return value.get<std::string>();
}

absl::StatusOr<std::vector<std::string>> Choices(const json& value, absl::string_view param) {
  if (!value.is_array()) return WrongType(param, "an array of strings", value);
  std::vector<std::string> choices;
  for (size_t i = 0; i < value.size(); ++i) {
    ASSIGN_OR_RETURN(std::string choice, StringField(value[i], absl::StrCat(param, "[", i, "]")));
    choices.push_back(std::move(choice));
  }
  return choices;
}

// OpenAI's response_format: text (no constraint), json_object, json_schema.
absl::StatusOr<OutputConstraint> ResponseFormat(const json& format) {
  OutputConstraint c;
  c.param = "response_format";
  if (!format.is_object()) return WrongType("response_format", "an object", format);
  const json* type = Find(format, "type");
  if (type == nullptr || !type->is_string()) {
    return InvalidField("response_format.type",
                        "must be \"text\", \"json_object\" or \"json_schema\"");
  }
  const std::string name = type->get<std::string>();
  if (name == "text") return c;
  if (name == "json_object") {
    c.kind = OutputConstraint::Kind::kJson;
    return c;
  }
  if (name != "json_schema") {
    return InvalidField(
        "response_format.type",
        absl::StrCat("\"", name, "\" is not one of \"text\", \"json_object\", \"json_schema\""));
  }
  const json* spec = Find(format, "json_schema");
  if (spec == nullptr || !spec->is_object()) {
    return InvalidField("response_format.json_schema", "must be an object with a schema");
  }
  const json* schema = Find(*spec, "schema");
  if (schema == nullptr) {
    return InvalidField("response_format.json_schema.schema", "is required");
  }
  c.kind = OutputConstraint::Kind::kJsonSchema;
  c.param = "response_format.json_schema.schema";
  ASSIGN_OR_RETURN(c.spec, SchemaText(*schema, c.param));
  return c;
}

// vLLM's structured_outputs object (json, regex, choice, grammar, json_object) or its older
// top-level guided_* fields: the member `key_prefix` + kind, named `param_prefix` + kind.
absl::StatusOr<OutputConstraint> VllmConstraint(const json& object, absl::string_view key_prefix,
                                                absl::string_view param_prefix) {
  OutputConstraint c;
  for (const std::string kind : {"json", "regex", "choice", "grammar", "json_object"}) {
    const json* value = Find(object, absl::StrCat(key_prefix, kind));
    if (value == nullptr || value->is_null()) continue;
    const std::string field = absl::StrCat(param_prefix, kind);
    if (c.active()) {
      return InvalidField(field, absl::StrCat("cannot be combined with ", c.param));
    }
    c.param = field;
    if (kind == "json") {
      c.kind = OutputConstraint::Kind::kJsonSchema;
      ASSIGN_OR_RETURN(c.spec, SchemaText(*value, field));
    } else if (kind == "regex") {
      c.kind = OutputConstraint::Kind::kRegex;
      ASSIGN_OR_RETURN(c.spec, StringField(*value, field));
    } else if (kind == "choice") {
      c.kind = OutputConstraint::Kind::kChoice;
      ASSIGN_OR_RETURN(c.choices, Choices(*value, field));
    } else if (kind == "grammar") {
      c.kind = OutputConstraint::Kind::kGrammar;
      ASSIGN_OR_RETURN(c.spec, StringField(*value, field));
    } else {
      if (!value->is_boolean()) return WrongType(field, "a boolean", *value);
      if (value->get<bool>()) c.kind = OutputConstraint::Kind::kJson;
    }
  }
  return c;
}

}  // namespace

// What the request constrains its output to: response_format, vLLM's structured_outputs or its
// guided_* fields, at most one of them.
absl::StatusOr<OutputConstraint> GetConstraint(const json& body) {
  OutputConstraint constraint;
  if (const json* format = Find(body, "response_format")) {
    ASSIGN_OR_RETURN(constraint, ResponseFormat(*format));
  }
  std::vector<OutputConstraint> vllm;
  if (const json* structured = Find(body, "structured_outputs")) {
    if (!structured->is_object()) return WrongType("structured_outputs", "an object", *structured);
    for (const auto& [key, value] : structured->items()) {
      if (key != "json" && key != "regex" && key != "choice" && key != "grammar" &&
          key != "json_object" && !value.is_null()) {
        return InvalidField(absl::StrCat("structured_outputs.", key),
                            "is not supported by this server");
      }
    }
    ASSIGN_OR_RETURN(OutputConstraint c, VllmConstraint(*structured, "", "structured_outputs."));
    vllm.push_back(std::move(c));
  }
  ASSIGN_OR_RETURN(OutputConstraint guided, VllmConstraint(body, "guided_", "guided_"));
  vllm.push_back(std::move(guided));
  for (OutputConstraint& c : vllm) {
    if (!c.active()) continue;
    if (constraint.active()) {
      return InvalidField(c.param, absl::StrCat("cannot be combined with ", constraint.param));
    }
    constraint = std::move(c);
  }
  return constraint;
}

}  // namespace tpserve
