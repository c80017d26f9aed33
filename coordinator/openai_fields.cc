#include "coordinator/openai_fields.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/openai_error.h"

namespace tpserve {
namespace {

// Integers beyond this arrive from JSON as doubles that no longer hold every integer exactly.
constexpr double kMaxExactDouble = 9007199254740992.0;  // 2^53

}  // namespace

using json = nlohmann::ordered_json;

std::string_view StdView(absl::string_view text) { return {text.data(), text.size()}; }

const json* Find(const json& object, absl::string_view name) {
  const auto it = object.find(std::string(name));
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status WrongType(absl::string_view param, absl::string_view want, const json& value) {
  return InvalidField(param, absl::StrCat("must be ", want, ", not ", value.type_name()));
}

absl::StatusOr<int64_t> AsInt(const json& value, absl::string_view param) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidField(param, absl::StrCat(v, " is out of range"));
    }
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  // Some clients write every number as a float: 4.0 is the integer 4, 4.5 is an error.
  if (value.is_number_float()) {
    const double v = value.get<double>();
    if (std::isfinite(v) && std::trunc(v) == v && std::abs(v) <= kMaxExactDouble) {
      return static_cast<int64_t>(v);
    }
    return InvalidField(param, absl::StrCat("must be an integer, got ", v));
  }
  return WrongType(param, "an integer", value);
}

absl::StatusOr<std::optional<int64_t>> GetInt(const json& object, absl::string_view name) {
  const json* value = Find(object, name);
  if (value == nullptr) return std::nullopt;
  return AsInt(*value, name);
}

absl::StatusOr<int64_t> GetIntIn(const json& object, absl::string_view name, int64_t fallback,
                                 int64_t lo, int64_t hi) {
  ASSIGN_OR_RETURN(std::optional<int64_t> value, GetInt(object, name));
  if (!value.has_value()) return fallback;
  if (*value < lo || *value > hi) {
    return InvalidField(name, absl::StrCat("must be in [", lo, ", ", hi, "], got ", *value));
  }
  return *value;
}

absl::StatusOr<std::optional<bool>> GetBool(const json& object, absl::string_view name) {
  const json* value = Find(object, name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) return WrongType(name, "a boolean", *value);
  return value->get<bool>();
}

}  // namespace tpserve
