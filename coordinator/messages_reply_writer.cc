#include "coordinator/messages_reply_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "coordinator/http_replies.h"

namespace tpserve {
namespace {

using nlohmann::json;

const char* StopReason(std::optional<FinishReason> finish, bool called_tools,
                       const std::string& stop_string) {
  if (finish == FinishReason::kLength) return "max_tokens";
  if (!stop_string.empty()) return "stop_sequence";
  return called_tools ? "tool_use" : "end_turn";
}

json StopSequence(const std::string& stop_string) {
  return stop_string.empty() ? json(nullptr) : json(stop_string);
}

// A call's arguments as the input object (the grammar made them JSON; text that is not an object
// becomes an empty input rather than a broken block).
json Input(const ParsedToolCall& call) {
  json input = ParseBoundedJson<json>(call.arguments);
  return input.is_object() ? input : json::object();
}

}  // namespace

MessagesReplyWriter::MessagesReplyWriter(uint64_t request_id, std::string model,
                                         int32_t prompt_tokens)
    : id_(absl::StrCat("msg_", request_id)),
      model_(std::move(model)),
      prompt_tokens_(prompt_tokens) {}

json MessagesReplyWriter::UsageJson(const Usage& usage) const {
  return {{"input_tokens", usage.prompt_tokens},
          {"output_tokens", usage.completion_tokens},
          {"cache_read_input_tokens", usage.cached_prompt_tokens},
          {"cache_creation_input_tokens", 0}};
}

json MessagesReplyWriter::ToolUse(const ParsedToolCall& call, int32_t number,
                                  bool with_input) const {
  return {{"type", "tool_use"},
          {"id", absl::StrCat("toolu_", id_.substr(4), "_", number)},
          {"name", call.name},
          {"input", with_input ? Input(call) : json::object()}};
}

std::string MessagesReplyWriter::Open() {
  const json message = {{"id", id_},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", model_},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", UsageJson({prompt_tokens_, 0, 0})}};
  return NamedSseEvent("message_start", {{"type", "message_start"}, {"message", message}});
}

std::string MessagesReplyWriter::SwitchTo(Block next) {
  if (open_ == next) return "";
  std::string events;
  if (open_ != Block::kNone) {
    events += NamedSseEvent("content_block_stop",
                            {{"type", "content_block_stop"}, {"index", blocks_ - 1}});
  }
  open_ = next;
  if (next == Block::kNone) return events;
  const json block = next == Block::kThinking
                         ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                         : json{{"type", "text"}, {"text", ""}};
  events += NamedSseEvent(
      "content_block_start",
      {{"type", "content_block_start"}, {"index", blocks_++}, {"content_block", block}});
  return events;
}

std::string MessagesReplyWriter::Add(const SampleNews& news) {
  std::string events;
  const ReplyDelta& delta = news.delta;
  if (!delta.reasoning.empty()) {
    events += SwitchTo(Block::kThinking);
    events +=
        NamedSseEvent("content_block_delta",
                      {{"type", "content_block_delta"},
                       {"index", blocks_ - 1},
                       {"delta", {{"type", "thinking_delta"}, {"thinking", delta.reasoning}}}});
  }
  if (!delta.content.empty()) {
    events += SwitchTo(Block::kText);
    events += NamedSseEvent("content_block_delta",
                            {{"type", "content_block_delta"},
                             {"index", blocks_ - 1},
                             {"delta", {{"type", "text_delta"}, {"text", delta.content}}}});
  }
  for (const ParsedToolCall& call : delta.calls) {
    events += SwitchTo(Block::kNone);
    const int32_t index = blocks_++;
    events += NamedSseEvent("content_block_start",
                            {{"type", "content_block_start"},
                             {"index", index},
                             {"content_block", ToolUse(call, calls_++, /*with_input=*/false)}});
    events += NamedSseEvent(
        "content_block_delta",
        {{"type", "content_block_delta"},
         {"index", index},
         {"delta", {{"type", "input_json_delta"}, {"partial_json", Input(call).dump()}}}});
    events +=
        NamedSseEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
  }
  if (news.finish.has_value()) {
    finish_ = news.finish;
    stop_string_ = news.stop_string;
    events += SwitchTo(Block::kNone);
  }
  return events;
}

std::string MessagesReplyWriter::Close(const Usage& usage) {
  return NamedSseEvent("message_delta",
                       {{"type", "message_delta"},
                        {"delta",
                         {{"stop_reason", StopReason(finish_, calls_ > 0, stop_string_)},
                          {"stop_sequence", StopSequence(stop_string_)}}},
                        {"usage", UsageJson(usage)}}) +
         NamedSseEvent("message_stop", {{"type", "message_stop"}});
}

std::string MessagesReplyWriter::Fail(const absl::Status& status) {
  return NamedSseEvent(
      "error", {{"type", "error"},
                {"error", {{"type", "api_error"}, {"message", std::string(status.message())}}}});
}

HttpReply MessagesReplyWriter::Whole(std::vector<ChoiceOutput>& choices, const Usage& usage) {
  const ChoiceOutput& c = choices.front();
  json content = json::array();
  if (!c.reasoning.empty()) {
    content.push_back({{"type", "thinking"}, {"thinking", c.reasoning}, {"signature", ""}});
  }
  if (!c.text.empty()) content.push_back({{"type", "text"}, {"text", c.text}});
  for (size_t k = 0; k < c.tool_calls.size(); ++k) {
    content.push_back(ToolUse(c.tool_calls[k], static_cast<int32_t>(k), /*with_input=*/true));
  }
  return JsonReply(
      200, {{"id", id_},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model_},
            {"content", std::move(content)},
            {"stop_reason", StopReason(c.finish_reason, !c.tool_calls.empty(), c.stop_string)},
            {"stop_sequence", StopSequence(c.stop_string)},
            {"usage", UsageJson(usage)}});
}

}  // namespace tpserve
