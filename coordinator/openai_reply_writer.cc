#include "coordinator/openai_reply_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/http_replies.h"
#include "coordinator/openai_error.h"

namespace tpserve {

namespace {

ResponseHeader WithCallIds(ResponseHeader header, const OpenAiRequest& request) {
  header.mistral_call_ids = WantsMistralCallIds(request.tool_syntax);
  return header;
}

// `chunk(text)` as an SSE event, from `*event`, made of chunk(kMarker) the first time.
template <typename Chunk>
std::string TemplatedEvent(std::optional<SseTextEvent>* event, const std::string& text,
                           const Chunk& chunk) {
  if (!event->has_value()) *event = SseTextEvent::From(chunk(SseTextEvent::kMarker));
  return event->has_value() ? (*event)->Render(text) : SseEvent(chunk(text));
}

}  // namespace

OpenAiReplyWriter::OpenAiReplyWriter(ResponseHeader header, const Tokenizer* tokenizer,
                                     const OpenAiRequest& request, int32_t num_samples,
                                     std::vector<TokenLogprob> prompt_logprobs)
    : responder_(WithCallIds(std::move(header), request), tokenizer, request.params.logprobs >= 0,
                 request.reasoning != ReasoningStart::kNone && request.include_reasoning),
      chat_(request.endpoint == OpenAiEndpoint::kChatCompletions),
      with_logprobs_(request.params.logprobs >= 0),
      with_tools_(request.tool_syntax.has_value()),
      include_usage_(request.include_usage),
      echo_(request.echo),
      return_prompt_logprobs_(request.return_prompt_logprobs),
      echo_text_(request.echo_text),
      num_samples_(num_samples),
      prompt_logprobs_(std::move(prompt_logprobs)),
      tool_calls_(num_samples, 0),
      text_offsets_(num_samples, 0),
      content_events_(num_samples),
      reasoning_events_(num_samples) {}

std::string OpenAiReplyWriter::ContentEvent(int32_t i, const std::string& text) {
  // Without logprobs the text offset is not touched.
  return TemplatedEvent(&content_events_[i], text, [&](const std::string& t) {
    int32_t offset = 0;
    return responder_.DeltaChunk(i, t, {}, std::nullopt, &offset);
  });
}

std::string OpenAiReplyWriter::ReasoningEvent(int32_t i, const std::string& text) {
  return TemplatedEvent(&reasoning_events_[i], text,
                        [&](const std::string& t) { return responder_.ReasoningChunk(i, t); });
}

std::string OpenAiReplyWriter::Open() {
  std::string events;
  if (chat_) {
    for (int32_t i = 0; i < num_samples_; ++i) events += SseEvent(responder_.RoleChunk(i));
  }
  if (echo_) {
    const std::vector<TokenLogprob> none;
    for (int32_t i = 0; i < num_samples_; ++i) {
      events +=
          SseEvent(responder_.DeltaChunk(i, echo_text_, with_logprobs_ ? prompt_logprobs_ : none,
                                         std::nullopt, &text_offsets_[i]));
    }
  }
  return events;
}

std::string OpenAiReplyWriter::Add(const SampleNews& news) {
  const int32_t i = news.index;
  const ReplyDelta& delta = news.delta;
  const bool has_logprobs = with_logprobs_ && !news.logprobs.empty();
  std::string events;
  if (!delta.reasoning.empty()) events += ReasoningEvent(i, delta.reasoning);
  // Without logprobs a chunk's text is all that changes in it.
  const bool text_only = !with_logprobs_ && !delta.content.empty();
  if (!with_tools_) {
    if (delta.content.empty() && !has_logprobs && !news.finish.has_value()) return events;
    if (text_only && !news.finish.has_value()) return events + ContentEvent(i, delta.content);
    return events + SseEvent(responder_.DeltaChunk(i, delta.content, news.logprobs, news.finish,
                                                   &text_offsets_[i]));
  }
  // Content as the parser releases it, each call once whole, the finish after them.
  if (text_only) {
    events += ContentEvent(i, delta.content);
  } else if (!delta.content.empty() || has_logprobs) {
    events += SseEvent(
        responder_.DeltaChunk(i, delta.content, news.logprobs, std::nullopt, &text_offsets_[i]));
  }
  if (!delta.calls.empty()) {
    events += SseEvent(responder_.ToolCallsChunk(i, delta.calls, tool_calls_[i]));
    tool_calls_[i] += static_cast<int32_t>(delta.calls.size());
  }
  if (news.finish.has_value()) {
    events += SseEvent(
        responder_.DeltaChunk(i, "", {}, news.finish, &text_offsets_[i], tool_calls_[i] > 0));
  }
  return events;
}

std::string OpenAiReplyWriter::Close(const Usage& usage) {
  std::string events;
  if (include_usage_) events += SseEvent(responder_.UsageChunk(usage));
  return events + kSseDone;
}

std::string OpenAiReplyWriter::Fail(const absl::Status& status) {
  // The response is already 200: the error travels as an event, as OpenAI's does.
  return absl::StrCat("data: ", ErrorBody(status), "\n\n", kSseDone);
}

HttpReply OpenAiReplyWriter::Whole(std::vector<ChoiceOutput>& choices, const Usage& usage) {
  for (ChoiceOutput& choice : choices) {
    if (echo_) {
      choice.text = echo_text_ + choice.text;
      if (with_logprobs_) {
        choice.logprobs.insert(choice.logprobs.begin(), prompt_logprobs_.begin(),
                               prompt_logprobs_.end());
      }
    }
    if (return_prompt_logprobs_) choice.prompt_logprobs = prompt_logprobs_;
  }
  return JsonReply(200, responder_.Response(choices, usage));
}

}  // namespace tpserve
