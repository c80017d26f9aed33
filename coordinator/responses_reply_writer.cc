#include "coordinator/responses_reply_writer.h"

#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/http_replies.h"
#include "coordinator/openai_error.h"

namespace tpserve {
namespace {

using nlohmann::json;

// Ids unique beyond one server's life: a stored response outlives none, but a client may hold an
// id across a restart, which must not name another conversation.
std::string RandomId(const char* prefix) {
  static absl::BitGen* bits = new absl::BitGen();
  static absl::Mutex mutex;
  absl::MutexLock lock(&mutex);
  return absl::StrFormat("%s_%016x%016x", prefix, absl::Uniform<uint64_t>(*bits),
                         absl::Uniform<uint64_t>(*bits));
}

}  // namespace

ResponsesReplyWriter::ResponsesReplyWriter(const ResponsesRequest& request, std::string model,
                                           absl::Time created, ResponseStore* store)
    : id_(RandomId("resp")),
      model_(std::move(model)),
      created_(absl::ToUnixSeconds(created)),
      echo_(request.echo),
      messages_(request.messages),
      store_(request.store ? store : nullptr) {}

std::string ResponsesReplyWriter::Event(const std::string& type, json fields) {
  fields["type"] = type;
  fields["sequence_number"] = sequence_++;
  return NamedSseEvent(type, fields);
}

json ResponsesReplyWriter::ItemJson(const OutputItem& item, bool done) const {
  const char* status = done ? "completed" : "in_progress";
  switch (item.kind) {
    case Kind::kReasoning: {
      json content = json::array();
      if (done) content.push_back({{"type", "reasoning_text"}, {"text", item.text}});
      return {{"type", "reasoning"},
              {"id", item.id},
              {"summary", json::array()},
              {"content", std::move(content)},
              {"status", status}};
    }
    case Kind::kMessage: {
      json content = json::array();
      if (done) {
        content.push_back(
            {{"type", "output_text"}, {"text", item.text}, {"annotations", json::array()}});
      }
      return {{"type", "message"},
              {"id", item.id},
              {"status", status},
              {"role", "assistant"},
              {"content", std::move(content)}};
    }
    case Kind::kCall:
      return {{"type", "function_call"},
              {"id", item.id},
              {"call_id", absl::StrCat("call_", item.id.substr(3))},
              {"name", item.call.name},
              {"arguments", done ? item.call.arguments : std::string()},
              {"status", status}};
  }
  return nullptr;
}

json ResponsesReplyWriter::Snapshot(const std::string& status, const json& usage) const {
  json output = json::array();
  for (const OutputItem& item : output_) output.push_back(ItemJson(item, /*done=*/true));
  json response = {{"id", id_},
                   {"object", "response"},
                   {"created_at", created_},
                   {"status", status},
                   {"model", model_},
                   {"output", std::move(output)},
                   {"error", nullptr},
                   {"incomplete_details", nullptr},
                   {"reasoning", nullptr},
                   {"usage", usage}};
  if (status == "incomplete") response["incomplete_details"] = {{"reason", "max_output_tokens"}};
  for (const auto& [key, value] : echo_.items()) response[key] = json(value);
  return response;
}

std::string ResponsesReplyWriter::Open() {
  const json snapshot = Snapshot("in_progress", nullptr);
  std::string events = Event("response.created", {{"response", snapshot}});
  return events + Event("response.in_progress", {{"response", snapshot}});
}

std::string ResponsesReplyWriter::CloseOpen() {
  if (!open_) return "";
  open_ = false;
  const OutputItem& item = output_.back();
  const int64_t index = static_cast<int64_t>(output_.size()) - 1;
  const json where = {{"item_id", item.id}, {"output_index", index}, {"content_index", 0}};
  std::string events;
  json done = where;
  json part;
  if (item.kind == Kind::kReasoning) {
    done["text"] = item.text;
    events += Event("response.reasoning_text.done", done);
    part = {{"type", "reasoning_text"}, {"text", item.text}};
  } else {
    done["text"] = item.text;
    done["logprobs"] = json::array();
    events += Event("response.output_text.done", done);
    part = {{"type", "output_text"}, {"text", item.text}, {"annotations", json::array()}};
  }
  json part_done = where;
  part_done["part"] = std::move(part);
  events += Event("response.content_part.done", part_done);
  events += Event("response.output_item.done",
                  {{"output_index", index}, {"item", ItemJson(item, /*done=*/true)}});
  return events;
}

std::string ResponsesReplyWriter::AppendText(Kind kind, const std::string& text) {
  std::string events;
  if (!open_ || output_.back().kind != kind) {
    events += CloseOpen();
    OutputItem item{kind, RandomId(kind == Kind::kReasoning ? "rs" : "msg"), "", {}};
    const int64_t index = static_cast<int64_t>(output_.size());
    events += Event("response.output_item.added",
                    {{"output_index", index}, {"item", ItemJson(item, /*done=*/false)}});
    const json part =
        kind == Kind::kReasoning
            ? json{{"type", "reasoning_text"}, {"text", ""}}
            : json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
    events += Event(
        "response.content_part.added",
        {{"item_id", item.id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
    output_.push_back(std::move(item));
    open_ = true;
  }
  OutputItem& item = output_.back();
  item.text += text;
  json delta = {{"item_id", item.id},
                {"output_index", static_cast<int64_t>(output_.size()) - 1},
                {"content_index", 0},
                {"delta", text}};
  if (kind == Kind::kMessage) delta["logprobs"] = json::array();
  return events + Event(kind == Kind::kReasoning ? "response.reasoning_text.delta"
                                                 : "response.output_text.delta",
                        std::move(delta));
}

std::string ResponsesReplyWriter::AddCall(const ParsedToolCall& call) {
  std::string events = CloseOpen();
  OutputItem item{Kind::kCall, RandomId("fc"), "", call};
  const int64_t index = static_cast<int64_t>(output_.size());
  events += Event("response.output_item.added",
                  {{"output_index", index}, {"item", ItemJson(item, /*done=*/false)}});
  events += Event("response.function_call_arguments.delta",
                  {{"item_id", item.id}, {"output_index", index}, {"delta", call.arguments}});
  events += Event("response.function_call_arguments.done", {{"item_id", item.id},
                                                            {"output_index", index},
                                                            {"name", call.name},
                                                            {"arguments", call.arguments}});
  events += Event("response.output_item.done",
                  {{"output_index", index}, {"item", ItemJson(item, /*done=*/true)}});
  output_.push_back(std::move(item));
  return events;
}

std::string ResponsesReplyWriter::Add(const SampleNews& news) {
  std::string events;
  if (!news.delta.reasoning.empty()) events += AppendText(Kind::kReasoning, news.delta.reasoning);
  if (!news.delta.content.empty()) events += AppendText(Kind::kMessage, news.delta.content);
  for (const ParsedToolCall& call : news.delta.calls) events += AddCall(call);
  if (news.finish.has_value()) {
    finish_ = news.finish;
    events += CloseOpen();
  }
  return events;
}

namespace {

json UsageJson(const Usage& usage) {
  return {{"input_tokens", usage.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens}}},
          {"output_tokens", usage.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

}  // namespace

void ResponsesReplyWriter::Store(const json& response) const {
  if (store_ == nullptr) return;
  nlohmann::ordered_json messages = messages_;
  nlohmann::ordered_json turn = {{"role", "assistant"}, {"content", ""}};
  nlohmann::ordered_json calls = nlohmann::ordered_json::array();
  std::string text;
  for (const OutputItem& item : output_) {
    if (item.kind == Kind::kMessage) text += item.text;
    if (item.kind != Kind::kCall) continue;
    calls.push_back({{"id", absl::StrCat("call_", item.id.substr(3))},
                     {"type", "function"},
                     {"function", {{"name", item.call.name}, {"arguments", item.call.arguments}}}});
  }
  turn["content"] = text;
  if (!calls.empty()) {
    if (text.empty()) turn["content"] = nullptr;
    turn["tool_calls"] = std::move(calls);
  }
  messages.push_back(std::move(turn));
  store_->Put(id_, StoredResponse{std::move(messages), nlohmann::ordered_json(response)});
}

std::string ResponsesReplyWriter::Close(const Usage& usage) {
  const bool incomplete = finish_ == FinishReason::kLength;
  const json response = Snapshot(incomplete ? "incomplete" : "completed", UsageJson(usage));
  Store(response);
  return Event(incomplete ? "response.incomplete" : "response.completed", {{"response", response}});
}

std::string ResponsesReplyWriter::Fail(const absl::Status& status) {
  return Event("error", {{"code", HttpStatusOf(status) >= 500 ? "server_error" : "invalid_request"},
                         {"message", std::string(status.message())},
                         {"param", nullptr}});
}

HttpReply ResponsesReplyWriter::Whole(std::vector<ChoiceOutput>& choices, const Usage& usage) {
  const ChoiceOutput& c = choices.front();
  if (!c.reasoning.empty()) output_.push_back({Kind::kReasoning, RandomId("rs"), c.reasoning, {}});
  if (!c.text.empty()) output_.push_back({Kind::kMessage, RandomId("msg"), c.text, {}});
  for (const ParsedToolCall& call : c.tool_calls) {
    output_.push_back({Kind::kCall, RandomId("fc"), "", call});
  }
  finish_ = c.finish_reason;
  const json response =
      Snapshot(finish_ == FinishReason::kLength ? "incomplete" : "completed", UsageJson(usage));
  Store(response);
  return JsonReply(200, response);
}

}  // namespace tpserve
