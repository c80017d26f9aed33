#include "coordinator/openai_error.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

constexpr char kParamPayload[] = "type.tpserve.dev/openai.param";
constexpr char kCodePayload[] = "type.tpserve.dev/openai.code";

nlohmann::json PayloadOrNull(const absl::Status& status, absl::string_view url) {
  const auto payload = status.GetPayload(url);  // absl::optional in this Abseil
  if (!payload.has_value()) return nullptr;
  return std::string(*payload);
}

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 401:
    case 404:
      return "invalid_request_error";
    case 429:
      return "rate_limit_exceeded";
    case 503:
      return "service_unavailable";
    default:
      return "server_error";
  }
}

}  // namespace

absl::Status InvalidField(absl::string_view param, absl::string_view message) {
  return WithParam(absl::InvalidArgumentError(absl::StrCat(param, ": ", message)), param);
}

absl::Status WithParam(absl::Status status, absl::string_view param) {
  if (!status.ok()) status.SetPayload(kParamPayload, absl::Cord(param));
  return status;
}

bool HasParam(const absl::Status& status) {
  return status.GetPayload(kParamPayload).has_value();
}

absl::Status ModelNotFound(absl::string_view model) {
  absl::Status status = WithParam(
      absl::NotFoundError(absl::StrCat("The model `", model, "` does not exist.")), "model");
  status.SetPayload(kCodePayload, absl::Cord("model_not_found"));
  return status;
}

absl::Status InvalidApiKey() {
  absl::Status status = absl::UnauthenticatedError(
      "Incorrect or missing API key: send it as 'Authorization: Bearer <key>'.");
  status.SetPayload(kCodePayload, absl::Cord("invalid_api_key"));
  return status;
}

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

std::string ErrorBody(const absl::Status& status) {
  const nlohmann::json body = {{"error",
                                {{"message", std::string(status.message())},
                                 {"type", ErrorType(HttpStatusOf(status))},
                                 {"param", PayloadOrNull(status, kParamPayload)},
                                 {"code", PayloadOrNull(status, kCodePayload)}}}};
  // The message may quote client bytes that are not UTF-8.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tpserve
