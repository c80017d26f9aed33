// The Messages and Responses APIs' bodies as the chat requests they become
// (messages_request.h, responses_request.h), and what each refuses, naming the field.
#include <string>

#include "coordinator/messages_request.h"
#include "coordinator/openai_error.h"
#include "coordinator/responses_request.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using json = nlohmann::ordered_json;

std::string ErrorOf(const absl::Status& status) { return std::string(status.message()); }

TEST(MessagesToChatBody, TranslatesTurnsToolsAndThinking) {
  const json body = json::parse(R"({
    "model": "m", "max_tokens": 50, "system": [{"type": "text", "text": "Be brief."}],
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "use the tool", "signature": "s"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
        {"type": "text", "text": "And tomorrow?"}]}],
    "tools": [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "stop_sequences": ["END"], "temperature": 0.5, "top_k": 3,
    "thinking": {"type": "enabled", "budget_tokens": 64},
    "metadata": {"user_id": "u1"}})");
  const absl::StatusOr<json> chat = MessagesToChatBody(body);
  ASSERT_TRUE(chat.ok()) << chat.status();
  const json expected_messages = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "toolu_1", "type": "function",
      "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
    {"role": "user", "content": "And tomorrow?"}])");
  EXPECT_EQ((*chat)["messages"], expected_messages);
  EXPECT_EQ((*chat)["tools"][0]["function"]["parameters"], json::parse(R"({"type": "object"})"));
  EXPECT_EQ((*chat)["tool_choice"], "required");
  EXPECT_EQ((*chat)["parallel_tool_calls"], false);
  EXPECT_EQ((*chat)["stop"], json::array({"END"}));
  EXPECT_EQ((*chat)["thinking_token_budget"], 64);
  EXPECT_EQ((*chat)["user"], "u1");
  EXPECT_EQ((*chat)["top_k"], 3);
  EXPECT_EQ((*chat)["max_tokens"], 50);
}

TEST(MessagesToChatBody, RefusesWhatItDoesNotDoNamingTheField) {
  const auto refused = [](const char* text) {
    absl::StatusOr<json> chat = MessagesToChatBody(json::parse(text));
    EXPECT_FALSE(chat.ok()) << text;
    return chat.ok() ? std::string() : ErrorOf(chat.status());
  };
  EXPECT_NE(refused(R"({"messages": [{"role": "user", "content": "hi"}]})").find("max_tokens"),
            std::string::npos);
  EXPECT_NE(refused(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "a"}, {"type": "image", "source": {}}]}]})")
                .find("messages[0].content[1]"),
            std::string::npos);
  EXPECT_NE(refused(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "a"}],
                       "n": 2})")
                .find("n:"),
            std::string::npos);
  EXPECT_NE(refused(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "a"}],
                       "tools": [{"type": "web_search_20250305", "name": "w"}]})")
                .find("tools[0].type"),
            std::string::npos);
  EXPECT_NE(refused(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "a"}],
                       "thinking": {"type": "adaptive"}})")
                .find("thinking.type"),
            std::string::npos);
  EXPECT_NE(refused(R"({"max_tokens": 5, "messages": [{"role": "system", "content": "a"}]})")
                .find("messages[0].role"),
            std::string::npos);
}

TEST(ResponsesToChatBody, TranslatesInputItemsAndFormat) {
  ResponseStore store(8, 1 << 20);
  const json body = json::parse(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 20,
    "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
      {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "18C"},
      {"type": "reasoning", "id": "rs_1", "summary": []}],
    "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": true}],
    "tool_choice": {"type": "function", "name": "weather"},
    "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
    "store": false, "metadata": {"k": "v"}})");
  const absl::StatusOr<ResponsesRequest> request = ResponsesToChatBody(body, store);
  ASSERT_TRUE(request.ok()) << request.status();
  const json expected = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "weather", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "18C"}])");
  EXPECT_EQ(request->chat["messages"], expected);
  // The instructions are not part of what a later turn continues.
  EXPECT_EQ(request->messages.size(), 3u);
  EXPECT_EQ(request->chat["max_tokens"], 20);
  EXPECT_EQ(request->chat["tool_choice"]["function"]["name"], "weather");
  EXPECT_EQ(request->chat["response_format"]["json_schema"]["name"], "w");
  EXPECT_FALSE(request->store);
  EXPECT_EQ(request->echo["metadata"]["k"], "v");
  EXPECT_EQ(request->echo["max_output_tokens"], 20);
}

TEST(ResponsesToChatBody, ContinuesAStoredConversation) {
  ResponseStore store(8, 1 << 20);
  store.Put("resp_a", {json::parse(R"([{"role": "user", "content": "Hi"},
                                       {"role": "assistant", "content": "Hello"}])"),
                       json::object()});
  const absl::StatusOr<ResponsesRequest> next = ResponsesToChatBody(
      json::parse(R"({"input": "Again", "previous_response_id": "resp_a", "instructions": "X"})"),
      store);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->chat["messages"].size(), 4u);
  EXPECT_EQ(next->chat["messages"][0]["content"], "X");
  EXPECT_EQ(next->chat["messages"][3]["content"], "Again");
  const absl::StatusOr<ResponsesRequest> gone = ResponsesToChatBody(
      json::parse(R"({"input": "Again", "previous_response_id": "resp_b"})"), store);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(HttpStatusOf(gone.status()), 404);
}

TEST(ResponsesToChatBody, RefusesWhatItDoesNotDoNamingTheField) {
  ResponseStore store(8, 1 << 20);
  const auto refused = [&store](const char* text) {
    absl::StatusOr<ResponsesRequest> r = ResponsesToChatBody(json::parse(text), store);
    EXPECT_FALSE(r.ok()) << text;
    return r.ok() ? std::string() : ErrorOf(r.status());
  };
  EXPECT_NE(refused(R"({"input": "a", "tools": [{"type": "web_search"}]})").find("tools[0].type"),
            std::string::npos);
  EXPECT_NE(refused(R"({"input": "a", "truncation": "auto"})").find("truncation"),
            std::string::npos);
  EXPECT_NE(
      refused(R"({"input": "a", "include": ["reasoning.encrypted_content"]})").find("include"),
      std::string::npos);
  EXPECT_NE(refused(R"({"input": "a", "reasoning": {"effort": "low"}})").find("reasoning"),
            std::string::npos);
  EXPECT_NE(
      refused(R"({"input": [{"type": "input_image", "image_url": "x"}]})").find("input[0].type"),
      std::string::npos);
  EXPECT_NE(refused(R"({"model": "m"})").find("input"), std::string::npos);
}

TEST(ResponseStore, EvictsTheLeastRecentlyUsed) {
  ResponseStore store(2, 1 << 20);
  store.Put("a", {json::array(), json::object()});
  store.Put("b", {json::array(), json::object()});
  ASSERT_TRUE(store.Get("a").has_value());  // a is now the most recent
  store.Put("c", {json::array(), json::object()});
  EXPECT_TRUE(store.Get("a").has_value());
  EXPECT_FALSE(store.Get("b").has_value());
  EXPECT_TRUE(store.Get("c").has_value());
  // A response over the byte bound is never kept.
  ResponseStore small(8, 64);
  small.Put("big", {json::array({std::string(100, 'x')}), json::object()});
  EXPECT_FALSE(small.Get("big").has_value());
}

}  // namespace
}  // namespace tpserve
