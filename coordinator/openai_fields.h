// Reading the fields of an OpenAI request body (nlohmann::ordered_json): each accessor names the field
// in its error (INVALID_ARGUMENT with the field as `param`), and a field sent as JSON null counts
// as absent, as OpenAI's clients send it. Shared by the request parser (openai_request.cc) and the
// output-constraint parser (openai_constraint.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// absl::string_view is not std::string_view in this Abseil build.
std::string_view StdView(absl::string_view text);

// The member `name` of `object`, or null when it is absent or JSON null.
const nlohmann::ordered_json* Find(const nlohmann::ordered_json& object, absl::string_view name);
// INVALID_ARGUMENT: `param` must be `want`, not the value's type.
absl::Status WrongType(absl::string_view param, absl::string_view want,
                       const nlohmann::ordered_json& value);
// An integer, also one written as a float without a fraction (4.0).
absl::StatusOr<int64_t> AsInt(const nlohmann::ordered_json& value, absl::string_view param);
absl::StatusOr<std::optional<int64_t>> GetInt(const nlohmann::ordered_json& object, absl::string_view name);
// `name` in [lo, hi], or `fallback` when unset.
absl::StatusOr<int64_t> GetIntIn(const nlohmann::ordered_json& object, absl::string_view name,
                                 int64_t fallback, int64_t lo, int64_t hi);
absl::StatusOr<std::optional<bool>> GetBool(const nlohmann::ordered_json& object, absl::string_view name);

}  // namespace tpserve
