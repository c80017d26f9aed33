// How one HTTP API shapes a generation's reply. HttpGeneration runs every request the same way
// (parse, submit, stream or collect the samples' news, split each sample's text with a
// ReplyStream) and asks the request's ReplyWriter for the bytes:
//
//   OpenAiReplyWriter      /v1/completions, /v1/chat/completions (openai_reply_writer.h)
//   MessagesReplyWriter    /v1/messages, Anthropic's Messages API (messages_reply_writer.h)
//   ResponsesReplyWriter   /v1/responses, OpenAI's Responses API (responses_reply_writer.h)
//
// Used on the request's I/O thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/http_message.h"
#include "coordinator/openai_response.h"
#include "coordinator/reply_stream.h"
#include "coordinator/request_handle.h"

namespace tpserve {

// The HTTP APIs that generate.
enum class GenerationApi { kCompletions, kChatCompletions, kMessages, kResponses };

// What one sample's news adds to its reply.
struct SampleNews {
  int32_t index = 0;
  ReplyDelta delta;
  std::vector<TokenLogprob> logprobs;  // of the news' tokens, when the request asked for them
  std::optional<FinishReason> finish;  // on the sample's last news
  std::string stop_string;             // with finish: the stop string that ended it, if one did
};

class ReplyWriter {
 public:
  virtual ~ReplyWriter() = default;

  // Streaming: the events that follow the stream's head (a role chunk, message_start, ...).
  virtual std::string Open() = 0;
  // The events of one sample's news; empty when it shows nothing yet.
  virtual std::string Add(const SampleNews& news) = 0;
  // Every sample is done, with this usage: the last events.
  virtual std::string Close(const Usage& usage) = 0;
  // The stream ends early with `status`: the events that say so.
  virtual std::string Fail(const absl::Status& status) = 0;

  // Not streaming: the whole reply, choice i the sample i.
  virtual HttpReply Whole(std::vector<ChoiceOutput>& choices, const Usage& usage) = 0;
};

// The error reply of `api` for `status` (Anthropic's error object for /v1/messages, OpenAI's for
// the rest), before any output.
HttpReply ApiErrorReply(GenerationApi api, const absl::Status& status);

// One server-sent event with an event name, as Anthropic's and the Responses API's streams send.
std::string NamedSseEvent(const std::string& name, const nlohmann::json& data);

}  // namespace tpserve
