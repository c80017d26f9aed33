// /v1/completions and /v1/chat/completions replies (ReplyWriter) in OpenAI's shapes
// (openai_response.h): chunks per sample, tool calls once whole, the model's thinking as
// delta.reasoning_content, the usage chunk with stream_options.include_usage, then [DONE];
// completions' echo before the first token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/openai_request.h"
#include "coordinator/openai_response.h"
#include "coordinator/reply_writer.h"
#include "coordinator/sse_text_event.h"

namespace tpserve {

class OpenAiReplyWriter : public ReplyWriter {
 public:
  // `prompt_logprobs`: the prompt's, when the request asked (echo, prompt_logprobs).
  OpenAiReplyWriter(ResponseHeader header, const Tokenizer* tokenizer, const OpenAiRequest& request,
                    int32_t num_samples, std::vector<TokenLogprob> prompt_logprobs);

  std::string Open() override;
  std::string Add(const SampleNews& news) override;
  std::string Close(const Usage& usage) override;
  std::string Fail(const absl::Status& status) override;
  HttpReply Whole(std::vector<ChoiceOutput>& choices, const Usage& usage) override;

 private:
  // A text-only chunk of sample `i` (no logprobs, no finish): the common one, from a template.
  std::string ContentEvent(int32_t i, const std::string& text);
  std::string ReasoningEvent(int32_t i, const std::string& text);

  const OpenAiResponder responder_;
  const bool chat_;
  const bool with_logprobs_;
  const bool with_tools_;
  const bool include_usage_;
  const bool echo_;
  const bool return_prompt_logprobs_;
  const std::string echo_text_;
  const int32_t num_samples_;
  const std::vector<TokenLogprob> prompt_logprobs_;
  std::vector<int32_t> tool_calls_;    // calls streamed per sample
  std::vector<int32_t> text_offsets_;  // legacy logprobs' text_offset per sample
  // Per sample, made on first use.
  std::vector<std::optional<SseTextEvent>> content_events_;
  std::vector<std::optional<SseTextEvent>> reasoning_events_;
};

}  // namespace tpserve
