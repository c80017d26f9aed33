#include "coordinator/http_replies.h"

#include "coordinator/openai_error.h"
#include "coordinator/openai_response.h"

namespace tpserve {
namespace {

constexpr char kJson[] = "application/json";

}  // namespace

HttpReply ErrorReply(const absl::Status& status, int http_status) {
  HttpReply reply{http_status, kJson, {}, ErrorBody(status)};
  if (http_status == 429 || http_status == 503) reply.headers.emplace_back("Retry-After", "1");
  return reply;
}

HttpReply ErrorReply(const absl::Status& status) {
  return ErrorReply(status, HttpStatusOf(status));
}

HttpReply JsonReply(int status, const nlohmann::json& body) {
  return {status, kJson, {}, Dump(body)};
}

}  // namespace tpserve
