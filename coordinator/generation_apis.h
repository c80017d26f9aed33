// The HTTP APIs that generate, each a request parser and a ReplyWriter over the one engine path:
//
//   /v1/completions        ParseCompletionRequest   OpenAiReplyWriter
//   /v1/chat/completions   ParseChatRequest         OpenAiReplyWriter
//   /v1/messages           MessagesToChatBody, then ParseChatBody   MessagesReplyWriter
//   /v1/responses          ResponsesToChatBody, then ParseChatBody  ResponsesReplyWriter
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/openai_request.h"
#include "coordinator/reply_writer.h"
#include "coordinator/response_store.h"
#include "coordinator/responses_request.h"

namespace tpserve {

struct ParsedGeneration {
  OpenAiRequest request;
  std::optional<ResponsesRequest> responses;  // /v1/responses: what its writer needs
};

// Pool thread: the body parsed and checked by `api`'s rules (the Responses API reads
// previous_response_id from `store`).
absl::StatusOr<ParsedGeneration> ParseGeneration(GenerationApi api, absl::string_view body,
                                                 const ServedModel& model, ResponseStore& store);

struct WriterContext {
  uint64_t request_id = 0;
  std::string model;
  absl::Time now;
  const Tokenizer* tokenizer = nullptr;
  int32_t num_samples = 1;
  std::vector<TokenLogprob> prompt_logprobs;  // when the request asked for them
  ResponseStore* store = nullptr;             // the Responses API's, for store true
};

std::unique_ptr<ReplyWriter> MakeReplyWriter(GenerationApi api, const ParsedGeneration& parsed,
                                             WriterContext context);

}  // namespace tpserve
