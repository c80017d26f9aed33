// /v1/messages replies (ReplyWriter) in Anthropic's shapes: a message whose content holds a
// thinking block (the model's thinking), a text block and a tool_use block per call; stop_reason
// end_turn, max_tokens, stop_sequence (with the string that matched) or tool_use. Streaming sends
// message_start, then each block as content_block_start, its deltas (thinking_delta, text_delta,
// input_json_delta) and content_block_stop, then message_delta with the stop reason and usage, and
// message_stop; an error after the start is an `error` event. One sample (the API has no n).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/reply_writer.h"

namespace tpserve {

class MessagesReplyWriter : public ReplyWriter {
 public:
  MessagesReplyWriter(uint64_t request_id, std::string model, int32_t prompt_tokens);

  std::string Open() override;
  std::string Add(const SampleNews& news) override;
  std::string Close(const Usage& usage) override;
  std::string Fail(const absl::Status& status) override;
  HttpReply Whole(std::vector<ChoiceOutput>& choices, const Usage& usage) override;

 private:
  enum class Block { kNone, kThinking, kText };
  // Events that end the open block and, unless `next` is kNone, start one of `next`.
  std::string SwitchTo(Block next);
  nlohmann::json ToolUse(const ParsedToolCall& call, int32_t number, bool with_input) const;
  nlohmann::json UsageJson(const Usage& usage) const;

  const std::string id_;
  const std::string model_;
  const int32_t prompt_tokens_;
  Block open_ = Block::kNone;
  int32_t blocks_ = 0;  // blocks started so far; the open one is blocks_ - 1
  int32_t calls_ = 0;
  std::optional<FinishReason> finish_;
  std::string stop_string_;
};

}  // namespace tpserve
