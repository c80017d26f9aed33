#include "coordinator/reply_writer.h"

#include "absl/strings/str_cat.h"
#include "coordinator/http_replies.h"
#include "coordinator/openai_error.h"

namespace tpserve {

HttpReply ApiErrorReply(GenerationApi api, const absl::Status& status) {
  HttpReply reply = ErrorReply(status);
  if (api != GenerationApi::kMessages) return reply;
  // Anthropic's shape: {"type": "error", "error": {"type": ..., "message": ...}}.
  const int code = reply.status;
  const char* type = code == 400   ? "invalid_request_error"
                     : code == 401 ? "authentication_error"
                     : code == 404 ? "not_found_error"
                     : code == 429 ? "rate_limit_error"
                     : code == 503 ? "overloaded_error"
                                   : "api_error";
  reply.body = Dump(
      {{"type", "error"}, {"error", {{"type", type}, {"message", std::string(status.message())}}}});
  return reply;
}

std::string NamedSseEvent(const std::string& name, const nlohmann::json& data) {
  return absl::StrCat("event: ", name, "\ndata: ", Dump(data), "\n\n");
}

}  // namespace tpserve
