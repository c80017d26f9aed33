#include "coordinator/generation_apis.h"

#include <utility>

#include "common/status_macros.h"
#include "coordinator/messages_reply_writer.h"
#include "coordinator/messages_request.h"
#include "coordinator/openai_error.h"
#include "coordinator/openai_reply_writer.h"
#include "coordinator/responses_reply_writer.h"

namespace tpserve {

absl::StatusOr<ParsedGeneration> ParseGeneration(GenerationApi api, absl::string_view body,
                                                 const ServedModel& model, ResponseStore& store) {
  ParsedGeneration parsed;
  switch (api) {
    case GenerationApi::kCompletions: {
      ASSIGN_OR_RETURN(parsed.request, ParseCompletionRequest(body, model));
      return parsed;
    }
    case GenerationApi::kChatCompletions: {
      ASSIGN_OR_RETURN(parsed.request, ParseChatRequest(body, model));
      return parsed;
    }
    case GenerationApi::kMessages: {
      ASSIGN_OR_RETURN(const nlohmann::ordered_json object, ParseJsonBody(body));
      ASSIGN_OR_RETURN(const nlohmann::ordered_json chat, MessagesToChatBody(object));
      ASSIGN_OR_RETURN(parsed.request, ParseChatBody(chat, model));
      return parsed;
    }
    case GenerationApi::kResponses: {
      ASSIGN_OR_RETURN(const nlohmann::ordered_json object, ParseJsonBody(body));
      ASSIGN_OR_RETURN(parsed.responses, ResponsesToChatBody(object, store));
      ASSIGN_OR_RETURN(parsed.request, ParseChatBody(parsed.responses->chat, model));
      // Its own body is what the response repeats and stores: the chat body is not needed.
      parsed.responses->chat = nullptr;
      return parsed;
    }
  }
  return absl::InternalError("unknown generation API");
}

std::unique_ptr<ReplyWriter> MakeReplyWriter(GenerationApi api, const ParsedGeneration& parsed,
                                             WriterContext context) {
  switch (api) {
    case GenerationApi::kMessages:
      return std::make_unique<MessagesReplyWriter>(
          context.request_id, std::move(context.model),
          static_cast<int32_t>(parsed.request.params.prompt.size()));
    case GenerationApi::kResponses:
      return std::make_unique<ResponsesReplyWriter>(*parsed.responses, std::move(context.model),
                                                    context.now, context.store);
    case GenerationApi::kCompletions:
    case GenerationApi::kChatCompletions:
      break;
  }
  return std::make_unique<OpenAiReplyWriter>(
      MakeResponseHeader(parsed.request.endpoint, context.request_id, std::move(context.model),
                         context.now),
      context.tokenizer, parsed.request, context.num_samples, std::move(context.prompt_logprobs));
}

}  // namespace tpserve
