// What the Messages and Responses APIs' translations into a chat body (messages_request.h,
// responses_request.h) share: the top-level fields each copies or reads, and the walk over its
// tools array.
#pragma once

#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// A chat body holding the fields of `body` named in `same_name`, as they are; a field in neither
// list (and not null) is refused, naming it as not a field of `api`.
absl::StatusOr<nlohmann::ordered_json> CopyKnownFields(
    const nlohmann::ordered_json& body, absl::Span<const std::string_view> same_name,
    absl::Span<const std::string_view> translated, std::string_view api);

// Each object of `body`'s `tools` array, with its param ("tools[2]"), made into a chat tool by
// `convert`; sets the chat body's `tools`. Absent: nothing.
absl::Status ConvertTools(const nlohmann::ordered_json& body,
                          absl::FunctionRef<absl::StatusOr<nlohmann::ordered_json>(
                              const nlohmann::ordered_json& tool, const std::string& param)>
                              convert,
                          nlohmann::ordered_json* chat);

}  // namespace tpserve
