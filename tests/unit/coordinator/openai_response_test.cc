// OpenAI response objects: the exact shapes of the `openai` Python package's Completion,
// ChatCompletion and ChatCompletionChunk, logprobs included.
#include "coordinator/openai_response.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/sse_text_event.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/coordinator/bundled_model.h"

namespace tpserve {
namespace {

using nlohmann::json;

class OpenAiResponseTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = BundledTokenizer();
    ASSERT_NE(tokenizer_, nullptr);
  }

  static OpenAiResponder Responder(OpenAiEndpoint endpoint, bool with_logprobs) {
    return OpenAiResponder(MakeResponseHeader(endpoint, 42, "smollm2", absl::FromUnixSeconds(7)),
                           tokenizer_, with_logprobs);
  }

  // The id of a token whose text is `text`.
  static int32_t Id(const std::string& text) {
    auto ids = tokenizer_->Encode(text, /*parse_special=*/false);
    EXPECT_TRUE(ids.ok() && ids->size() == 1) << text;
    return ids->front();
  }

  static const Tokenizer* tokenizer_;
};

const Tokenizer* OpenAiResponseTest::tokenizer_ = nullptr;

TEST_F(OpenAiResponseTest, TextCompletion) {
  const json response = Responder(OpenAiEndpoint::kCompletions, false)
                            .Response({{"Paris", {}, FinishReason::kLength, {}},
                                       {"Lyon.", {}, FinishReason::kStop, {}}},
                                      {5, 3, 2});
  EXPECT_EQ(response, json::parse(R"({
      "id": "cmpl-42", "object": "text_completion", "created": 7, "model": "smollm2",
      "choices": [
        {"index": 0, "text": "Paris", "logprobs": null, "finish_reason": "length"},
        {"index": 1, "text": "Lyon.", "logprobs": null, "finish_reason": "stop"}],
      "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8,
                "prompt_tokens_details": {"cached_tokens": 2}}})"));
}

TEST_F(OpenAiResponseTest, ChatCompletion) {
  const json response = Responder(OpenAiEndpoint::kChatCompletions, false)
                            .Response({{"Hello!", {}, FinishReason::kStop, {}}}, {9, 2, 0});
  EXPECT_EQ(response, json::parse(R"({
      "id": "chatcmpl-42", "object": "chat.completion", "created": 7, "model": "smollm2",
      "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!"},
                   "logprobs": null, "finish_reason": "stop"}],
      "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11,
                "prompt_tokens_details": {"cached_tokens": 0}}})"));
}

TEST_F(OpenAiResponseTest, ChatCompletionWithToolCalls) {
  const OpenAiResponder responder = Responder(OpenAiEndpoint::kChatCompletions, false);
  const std::vector<ParsedToolCall> calls = {{"get_weather", R"({"city":"Paris"})"},
                                             {"get_time", R"({"timezone":"CET"})"}};
  const json response = responder.Response({{"", {}, FinishReason::kStop, calls},
                                            {"Let me see.", {}, FinishReason::kLength, {calls[1]}}},
                                           {9, 20, 0});
  EXPECT_EQ(response["choices"], json::parse(R"([
      {"index": 0, "logprobs": null, "finish_reason": "tool_calls",
       "message": {"role": "assistant", "content": null, "tool_calls": [
         {"id": "call_42_0_0", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
         {"id": "call_42_0_1", "type": "function",
          "function": {"name": "get_time", "arguments": "{\"timezone\":\"CET\"}"}}]}},
      {"index": 1, "logprobs": null, "finish_reason": "length",
       "message": {"role": "assistant", "content": "Let me see.", "tool_calls": [
         {"id": "call_42_1_0", "type": "function",
          "function": {"name": "get_time", "arguments": "{\"timezone\":\"CET\"}"}}]}}])"));
  // Streamed: the second call of sample 0 is numbered 1 and has the id the whole reply gives it.
  const json chunk = responder.ToolCallsChunk(0, {calls[1]}, 1);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"], json::parse(R"({"tool_calls": [
      {"index": 1, "id": "call_42_0_1", "type": "function",
       "function": {"name": "get_time", "arguments": "{\"timezone\":\"CET\"}"}}]})"));
  int32_t offset = 0;
  EXPECT_EQ(responder.DeltaChunk(0, "", {}, FinishReason::kStop, &offset,
                                 /*called_tools=*/true)["choices"][0]["finish_reason"],
            "tool_calls");
}

// Mistral's templates take back only ids of 9 letters and digits.
TEST_F(OpenAiResponseTest, MistralToolCallIdsAreNineAlphanumerics) {
  ResponseHeader header =
      MakeResponseHeader(OpenAiEndpoint::kChatCompletions, 42, "smollm2", absl::FromUnixSeconds(7));
  header.mistral_call_ids = true;
  const OpenAiResponder responder(header, tokenizer_, false);
  const std::vector<ParsedToolCall> calls = {{"a", "{}"}, {"b", "{}"}, {"c", "{}"}};
  const json response = responder.Response({{"", {}, FinishReason::kStop, calls}}, {1, 1, 0});
  std::set<std::string> ids;
  for (const json& call : response["choices"][0]["message"]["tool_calls"]) {
    const std::string id = call["id"];
    EXPECT_EQ(id.size(), 9u) << id;
    EXPECT_TRUE(std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(c); })) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 3u);
  // Streamed, a call keeps the id the whole reply gives it.
  EXPECT_EQ(
      responder.ToolCallsChunk(0, {calls[1]}, 1)["choices"][0]["delta"]["tool_calls"][0]["id"],
      response["choices"][0]["message"]["tool_calls"][1]["id"]);
}

TEST_F(OpenAiResponseTest, LegacyLogprobs) {
  const int32_t hello = Id("Hello");
  const int32_t world = Id(" world");
  const std::vector<TokenLogprob> logprobs = {
      {hello, -0.5f, {{hello, -0.5f}, {world, -2.0f}}},
      {world, -std::numeric_limits<float>::infinity(), {{hello, -0.25f}}},
  };
  const json response = Responder(OpenAiEndpoint::kCompletions, true)
                            .Response({{"Hello world", logprobs, FinishReason::kLength, {}}}, {});
  EXPECT_EQ(response["choices"][0]["logprobs"], json::parse(R"({
      "tokens": ["Hello", " world"],
      "token_logprobs": [-0.5, -9999.0],
      "top_logprobs": [{"Hello": -0.5, " world": -2.0}, {"Hello": -0.25, " world": -9999.0}],
      "text_offset": [0, 5]})"));
}

TEST_F(OpenAiResponseTest, ChatLogprobs) {
  const int32_t hi = Id("Hi");
  const std::vector<TokenLogprob> logprobs = {{hi, -0.125f, {{hi, -0.125f}}}};
  const json response = Responder(OpenAiEndpoint::kChatCompletions, true)
                            .Response({{"Hi", logprobs, FinishReason::kStop, {}}}, {});
  EXPECT_EQ(response["choices"][0]["logprobs"], json::parse(R"({"content": [
      {"token": "Hi", "logprob": -0.125, "bytes": [72, 105],
       "top_logprobs": [{"token": "Hi", "logprob": -0.125, "bytes": [72, 105]}]}]})"));
}

TEST_F(OpenAiResponseTest, TokenThatIsPartOfACharacter) {
  const std::optional<int32_t> byte = tokenizer_->ByteToken(0xE2);
  ASSERT_TRUE(byte.has_value());
  const json response = Responder(OpenAiEndpoint::kChatCompletions, true)
                            .Response({{"", {{*byte, -1.0f, {}}}, FinishReason::kStop, {}}}, {});
  const json reparsed = json::parse(Dump(response));
  const json& token = reparsed["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(token["token"], "\xEF\xBF\xBD");  // U+FFFD
  EXPECT_EQ(token["bytes"], json::array({0xE2}));
}

TEST_F(OpenAiResponseTest, ChatChunks) {
  const OpenAiResponder responder = Responder(OpenAiEndpoint::kChatCompletions, false);
  int32_t offset = 0;
  EXPECT_EQ(responder.RoleChunk(1), json::parse(R"({
      "id": "chatcmpl-42", "object": "chat.completion.chunk", "created": 7, "model": "smollm2",
      "choices": [{"index": 1, "delta": {"role": "assistant", "content": ""},
                   "logprobs": null, "finish_reason": null}]})"));
  EXPECT_EQ(responder.DeltaChunk(1, "Hi", {}, std::nullopt, &offset)["choices"], json::parse(R"(
      [{"index": 1, "delta": {"content": "Hi"}, "logprobs": null, "finish_reason": null}])"));
  EXPECT_EQ(responder.DeltaChunk(0, "", {}, FinishReason::kLength, &offset)["choices"],
            json::parse(R"(
      [{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "length"}])"));
  EXPECT_EQ(responder.UsageChunk({4, 6, 0}), json::parse(R"({
      "id": "chatcmpl-42", "object": "chat.completion.chunk", "created": 7, "model": "smollm2",
      "choices": [],
      "usage": {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10,
                "prompt_tokens_details": {"cached_tokens": 0}}})"));
}

TEST_F(OpenAiResponseTest, CompletionChunksCarryTextOffsets) {
  const OpenAiResponder responder = Responder(OpenAiEndpoint::kCompletions, true);
  const int32_t hello = Id("Hello");
  const int32_t world = Id(" world");
  int32_t offset = 0;
  const json first =
      responder.DeltaChunk(0, "Hello", {{{hello, -1.0f, {}}}}, std::nullopt, &offset);
  EXPECT_EQ(first["object"], "text_completion");
  EXPECT_EQ(first["choices"][0]["text"], "Hello");
  EXPECT_EQ(first["choices"][0]["finish_reason"], nullptr);
  EXPECT_EQ(first["choices"][0]["logprobs"]["text_offset"], json::array({0}));
  const json second =
      responder.DeltaChunk(0, " world", {{{world, -1.0f, {}}}}, FinishReason::kStop, &offset);
  EXPECT_EQ(second["choices"][0]["logprobs"]["text_offset"], json::array({5}));
  EXPECT_EQ(second["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(offset, 11);
}

TEST(Sse, EventFraming) {
  EXPECT_EQ(SseEvent(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
}

// The template's bytes against the chunk dumped whole, for texts that escape every way nlohmann
// does: quotes, backslashes, control characters, multi-byte UTF-8, and bytes that are not UTF-8
// (replaced by U+FFFD).
TEST_F(OpenAiResponseTest, TextEventsEqualWholeChunks) {
  const std::vector<std::string> texts = {"Hello",
                                          " world",
                                          "",
                                          "\"quoted\"",
                                          "back\\slash",
                                          "line\nfeed\ttab\r\b\f",
                                          std::string("nul\0and\x01\x1f", 10),
                                          "\x7f",
                                          "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80",
                                          "half \xe2\x82",
                                          "\xff\xfe lone",
                                          "</script>\u2028"};
  for (const OpenAiEndpoint endpoint :
       {OpenAiEndpoint::kCompletions, OpenAiEndpoint::kChatCompletions}) {
    const OpenAiResponder responder = Responder(endpoint, false);
    for (const int32_t index : {0, 3}) {
      int32_t offset = 0;
      const std::optional<SseTextEvent> event = SseTextEvent::From(
          responder.DeltaChunk(index, SseTextEvent::kMarker, {}, std::nullopt, &offset));
      ASSERT_TRUE(event.has_value());
      for (const std::string& text : texts) {
        if (text.empty() && endpoint == OpenAiEndpoint::kChatCompletions) continue;  // {} delta
        EXPECT_EQ(event->Render(text),
                  SseEvent(responder.DeltaChunk(index, text, {}, std::nullopt, &offset)))
            << text;
      }
    }
  }
  const OpenAiResponder chat = Responder(OpenAiEndpoint::kChatCompletions, false);
  const std::optional<SseTextEvent> reasoning =
      SseTextEvent::From(chat.ReasoningChunk(1, SseTextEvent::kMarker));
  ASSERT_TRUE(reasoning.has_value());
  for (const std::string& text : texts) {
    EXPECT_EQ(reasoning->Render(text), SseEvent(chat.ReasoningChunk(1, text))) << text;
  }
}

TEST(Sse, TextEventNeedsTheMarkerOnce) {
  EXPECT_FALSE(SseTextEvent::From(json{{"text", "no marker"}}).has_value());
  EXPECT_FALSE(SseTextEvent::From(json{{"a", SseTextEvent::kMarker}, {"b", SseTextEvent::kMarker}})
                   .has_value());
  const std::optional<SseTextEvent> event =
      SseTextEvent::From(json{{"a", 1}, {"t", SseTextEvent::kMarker}, {"z", "end"}});
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->Render("x\"y"), "data: {\"a\":1,\"t\":\"x\\\"y\",\"z\":\"end\"}\n\n");
}

}  // namespace
}  // namespace tpserve
