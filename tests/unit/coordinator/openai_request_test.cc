// OpenAI request parsing: every refused body names its field (`param`) and gets the right HTTP
// status; accepted bodies become the GenerateParams the engine expects. Uses the bundled model's
// tokenizer and chat template.
#include "coordinator/openai_request.h"

#include <memory>
#include <string>
#include <vector>

#include "coordinator/openai_error.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/coordinator/bundled_model.h"

namespace tpserve {
namespace {

using nlohmann::json;

constexpr int64_t kContext = 8192;

class OpenAiRequestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = BundledTokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    auto chat = ChatTemplate::Load(*BundledModel(), *tokenizer_, /*override_path=*/"");
    ASSERT_TRUE(chat.ok()) << chat.status();
    chat_template_ = new ChatTemplate(*chat);
  }

  static ServedModel Model() {
    return {"smollm2",
            kContext,
            tokenizer_,
            chat_template_,
            {},
            {},
            DetectToolCallFormat(chat_template_->source())};
  }

  static const Tokenizer* tokenizer_;
  static const ChatTemplate* chat_template_;
};

const Tokenizer* OpenAiRequestTest::tokenizer_ = nullptr;
const ChatTemplate* OpenAiRequestTest::chat_template_ = nullptr;

struct BadCase {
  std::string body;
  int http_status;
  json param;  // the expected error.param (null: the body as a whole)
};

// The OpenAI error body of a refused request.
json ErrorOf(const absl::Status& status) { return json::parse(ErrorBody(status))["error"]; }

void ExpectRefused(const absl::StatusOr<OpenAiRequest>& parsed, const BadCase& c) {
  ASSERT_FALSE(parsed.ok()) << c.body;
  EXPECT_EQ(HttpStatusOf(parsed.status()), c.http_status) << c.body << ": " << parsed.status();
  const json error = ErrorOf(parsed.status());
  EXPECT_EQ(error["param"], c.param) << c.body << ": " << parsed.status();
  EXPECT_TRUE(error["message"].is_string());
  EXPECT_TRUE(error["type"].is_string());
  EXPECT_TRUE(error.contains("code"));
}

TEST_F(OpenAiRequestTest, CompletionRefusalsNameTheField) {
  const std::vector<BadCase> cases = {
      {"{", 400, nullptr},
      {"", 400, nullptr},
      {"[1, 2]", 400, nullptr},
      {"{\"prompt\": \"caf\xff\"}", 400, nullptr},  // not UTF-8
      {R"({"prompt": "\ud800"})", 400, nullptr},    // a lone surrogate
      {R"({"model": "gpt-4", "prompt": "hi"})", 404, "model"},
      {R"({"model": 7, "prompt": "hi"})", 400, "model"},
      {R"({})", 400, "prompt"},
      {R"({"prompt": 5})", 400, "prompt"},
      {R"({"prompt": []})", 400, "prompt"},
      {R"({"prompt": ["a", "b"]})", 400, "prompt"},
      {R"({"prompt": [[]]})", 400, "prompt[0]"},
      {R"({"prompt": [1, "a"]})", 400, "prompt[1]"},
      {R"({"prompt": [1, -1]})", 400, "prompt[1]"},
      {R"({"prompt": [1, 2.5]})", 400, "prompt[1]"},
      {R"({"prompt": [49152]})", 400, "prompt[0]"},
      {R"({"prompt": "hi", "max_tokens": -1})", 400, "max_tokens"},
      {R"({"prompt": "hi", "max_tokens": 0})", 400, "max_tokens"},
      {R"({"prompt": "hi", "max_tokens": 8193})", 400, "max_tokens"},
      {R"({"prompt": "hi", "max_tokens": 18446744073709551615})", 400, "max_tokens"},
      {R"({"prompt": "hi", "max_tokens": 1e300})", 400, "max_tokens"},
      {R"({"prompt": "hi", "max_tokens": "4"})", 400, "max_tokens"},
      {R"({"prompt": "hi", "max_tokens": 1.5})", 400, "max_tokens"},
      {R"({"prompt": "hi", "temperature": -0.1})", 400, "temperature"},
      {R"({"prompt": "hi", "temperature": 1e39})", 400, "temperature"},
      {R"({"prompt": "hi", "temperature": "hot"})", 400, "temperature"},
      {R"({"prompt": "hi", "top_p": 1.5})", 400, "top_p"},
      {R"({"prompt": "hi", "top_p": 0})", 400, "top_p"},
      {R"({"prompt": "hi", "top_k": -2})", 400, "top_k"},
      {R"({"prompt": "hi", "min_p": 2})", 400, "min_p"},
      {R"({"prompt": "hi", "repetition_penalty": 0})", 400, "repetition_penalty"},
      {R"({"prompt": "hi", "presence_penalty": 3})", 400, "presence_penalty"},
      {R"({"prompt": "hi", "frequency_penalty": -2.5})", 400, "frequency_penalty"},
      {R"({"prompt": "hi", "n": 0})", 400, "n"},
      {R"({"prompt": "hi", "n": 17})", 400, "n"},
      {R"({"prompt": "hi", "n": true})", 400, "n"},
      {R"({"prompt": "hi", "stream": "yes"})", 400, "stream"},
      {R"({"prompt": "hi", "stream_options": {"include_usage": true}})", 400, "stream_options"},
      {R"({"prompt": "hi", "stream": true, "stream_options": []})", 400, "stream_options"},
      {R"({"prompt": "hi", "stream": true, "stream_options": {"include_usage": 1}})", 400,
       "stream_options.include_usage"},
      {R"({"prompt": "hi", "stop": 3})", 400, "stop"},
      {R"({"prompt": "hi", "stop": ""})", 400, "stop"},
      {R"({"prompt": "hi", "stop": ["a", 1]})", 400, "stop[1]"},
      {R"({"prompt": "hi", "stop": ["a", ""]})", 400, "stop[1]"},
      {R"({"prompt": "hi", "stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]})",
       400, "stop"},
      {R"({"prompt": "hi", "stop_token_ids": [1, 99999999]})", 400, "stop_token_ids[1]"},
      {R"({"prompt": "hi", "stop_token_ids": 2})", 400, "stop_token_ids"},
      {R"({"prompt": "hi", "ignore_eos": 1})", 400, "ignore_eos"},
      {R"({"prompt": "hi", "speculative_decoding": "no"})", 400, "speculative_decoding"},
      {R"({"prompt": "hi", "seed": "x"})", 400, "seed"},
      {R"({"prompt": "hi", "seed": 1.5})", 400, "seed"},
      {R"({"prompt": "hi", "logprobs": 21})", 400, "logprobs"},
      {R"({"prompt": "hi", "logprobs": -1})", 400, "logprobs"},
      {R"({"prompt": "hi", "logprobs": true})", 400, "logprobs"},
      {R"({"prompt": "hi", "prompt_logprobs": 1, "stream": true})", 400, "prompt_logprobs"},
      {R"({"prompt": "hi", "suffix": "end"})", 400, "suffix"},
      {R"({"prompt": "hi", "best_of": 3})", 400, "best_of"},
      {R"({"prompt": "hi", "logit_bias": {"1": "much"}})", 400, "logit_bias"},
      {R"({"prompt": "hi", "logit_bias": {"x": 5}})", 400, "logit_bias"},
  };
  for (const BadCase& c : cases) ExpectRefused(ParseCompletionRequest(c.body, Model()), c);
}

TEST_F(OpenAiRequestTest, ChatRefusalsNameTheField) {
  const std::vector<BadCase> cases = {
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}", 400, nullptr},
      {R"({"model": "other", "messages": [{"role": "user", "content": "hi"}]})", 404, "model"},
      {R"({})", 400, "messages"},
      {R"({"messages": []})", 400, "messages"},
      {R"({"messages": "hi"})", 400, "messages"},
      {R"({"messages": [3]})", 400, "messages[0]"},
      {R"({"messages": [{"content": "hi"}]})", 400, "messages[0].role"},
      {R"({"messages": [{"role": "robot", "content": "hi"}]})", 400, "messages[0].role"},
      {R"({"messages": [{"role": 1, "content": "hi"}]})", 400, "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "user"}]})", 400,
       "messages[1].content"},
      {R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
       "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]})", 400,
       "messages[0].content[0].text"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0})", 400,
       "max_completion_tokens"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000})", 400,
       "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": 3})", 400, "logprobs"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3})", 400,
       "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true,
           "top_logprobs": 21})",
       400, "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})", 400,
       "tools[0].function"},
      {R"({"messages": [{"role": "user", "content": "hi"}],
           "response_format": {"type": "xml"}})",
       400, "response_format.type"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_p": 2})", 400, "top_p"},
  };
  for (const BadCase& c : cases) ExpectRefused(ParseChatRequest(c.body, Model()), c);
}

TEST_F(OpenAiRequestTest, ModelNotFoundHasOpenAiCode) {
  const auto parsed = ParseCompletionRequest(R"({"model": "x", "prompt": "hi"})", Model());
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(ErrorOf(parsed.status())["code"], "model_not_found");
  EXPECT_EQ(ErrorOf(parsed.status())["type"], "invalid_request_error");
}

TEST_F(OpenAiRequestTest, DeeplyNestedBodyIsRefusedNotACrash) {
  const std::string body =
      "{\"prompt\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  const absl::StatusOr<OpenAiRequest> parsed = ParseCompletionRequest(body, Model());
  ExpectRefused(parsed, {"nested", 400, nullptr});
  EXPECT_NE(parsed.status().message().find("deeper than 64 levels"), absl::string_view::npos);
}

TEST_F(OpenAiRequestTest, CompletionDefaults) {
  const auto parsed = ParseCompletionRequest(R"({"model": "smollm2", "prompt": "Hello"})", Model());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const GenerateParams& p = parsed->params;
  EXPECT_EQ(parsed->endpoint, OpenAiEndpoint::kCompletions);
  EXPECT_FALSE(parsed->stream);
  EXPECT_FALSE(parsed->include_usage);
  EXPECT_EQ(p.max_tokens, 16);
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.logprobs, -1);
  EXPECT_FALSE(p.ignore_eos);
  EXPECT_TRUE(p.stop.empty());
  EXPECT_FLOAT_EQ(p.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 1.0f);
  EXPECT_EQ(p.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.0f);
  EXPECT_FLOAT_EQ(p.sampling.repetition_penalty, 1.0f);
  auto expected = tokenizer_->Encode("Hello", /*parse_special=*/true);
  ASSERT_TRUE(expected.ok());
  if (tokenizer_->add_bos()) expected->insert(expected->begin(), tokenizer_->bos_id());
  EXPECT_EQ(p.prompt, *expected);
}

TEST_F(OpenAiRequestTest, AbsentSamplingFieldsTakeTheModelsDefaults) {
  ServedModel model = Model();
  model.default_sampling.temperature = 0.6f;
  model.default_sampling.top_k = 20;
  model.default_sampling.top_p = 0.8f;
  model.default_sampling.repetition_penalty = 1.05f;
  const auto parsed = ParseChatRequest(
      R"({"messages": [{"role": "user", "content": "hi"}], "top_p": 0.5, "top_k": -1})", model);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const SamplingParams& s = parsed->params.sampling;
  EXPECT_FLOAT_EQ(s.temperature, 0.6f);
  EXPECT_EQ(s.top_k, 0);  // the request's -1: off
  EXPECT_FLOAT_EQ(s.top_p, 0.5f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.05f);
  EXPECT_FLOAT_EQ(s.min_p, 0.0f);
}

TEST_F(OpenAiRequestTest, ConstraintsFromEachField) {
  struct Case {
    const char* fields;
    OutputConstraint::Kind kind;
    const char* spec;
    const char* param;
  };
  const Case cases[] = {
      {R"("response_format": {"type": "text"})", OutputConstraint::Kind::kNone, "",
       "response_format"},
      {R"("response_format": {"type": "json_object"})", OutputConstraint::Kind::kJson, "",
       "response_format"},
      // The schema keeps the order its properties were sent in.
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema":
           {"type": "object", "properties": {"z": {}, "a": {}}}}})",
       OutputConstraint::Kind::kJsonSchema, R"({"type":"object","properties":{"z":{},"a":{}}})",
       "response_format.json_schema.schema"},
      {R"("guided_json": "{\"type\": \"integer\"}")", OutputConstraint::Kind::kJsonSchema,
       R"({"type": "integer"})", "guided_json"},
      {R"("guided_regex": "[0-9]+")", OutputConstraint::Kind::kRegex, "[0-9]+", "guided_regex"},
      {R"("guided_grammar": "root ::= \"a\"")", OutputConstraint::Kind::kGrammar, R"(root ::= "a")",
       "guided_grammar"},
      {R"("structured_outputs": {"regex": "x+"})", OutputConstraint::Kind::kRegex, "x+",
       "structured_outputs.regex"},
      {R"("structured_outputs": {"json_object": true})", OutputConstraint::Kind::kJson, "",
       "structured_outputs.json_object"},
  };
  for (const Case& c : cases) {
    const std::string body = absl::StrCat(R"({"prompt": "x", )", c.fields, "}");
    const auto parsed = ParseCompletionRequest(body, Model());
    ASSERT_TRUE(parsed.ok()) << body << ": " << parsed.status();
    const OutputConstraint& got = parsed->params.constraint;
    EXPECT_EQ(got.kind, c.kind) << body;
    EXPECT_EQ(got.spec, c.spec) << body;
    if (got.active()) {
      EXPECT_EQ(got.param, c.param) << body;
    }
  }
  const auto choice = ParseChatRequest(
      R"({"messages": [{"role": "user", "content": "hi"}], "guided_choice": ["a", "b c"]})",
      Model());
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->params.constraint.kind, OutputConstraint::Kind::kChoice);
  EXPECT_EQ(choice->params.constraint.choices, (std::vector<std::string>{"a", "b c"}));
}

TEST_F(OpenAiRequestTest, UnsetSeedsDiffer) {
  const auto a = ParseCompletionRequest(R"({"prompt": "Hello"})", Model());
  const auto b = ParseCompletionRequest(R"({"prompt": "Hello"})", Model());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->params.sampling.seed, b->params.sampling.seed);
}

TEST_F(OpenAiRequestTest, CompletionEveryField) {
  const auto parsed = ParseCompletionRequest(R"({
      "model": "smollm2", "prompt": [[1, 2, 3]], "max_tokens": 4.0, "temperature": 0,
      "top_p": 0.5, "top_k": -1, "min_p": 0.1, "repetition_penalty": 1.2,
      "presence_penalty": -1, "frequency_penalty": 0.5, "seed": -1, "n": 3, "best_of": 3,
      "stream": true, "stream_options": {"include_usage": true}, "logprobs": 5,
      "stop": "\n", "stop_token_ids": [2], "ignore_eos": true, "echo": false, "user": "u",
      "logit_bias": {}, "suffix": null, "speculative_decoding": false})",
                                             Model());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const GenerateParams& p = parsed->params;
  EXPECT_EQ(p.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(p.max_tokens, 4);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.5f);
  EXPECT_EQ(p.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(p.sampling.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(p.sampling.presence_penalty, -1.0f);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, 0.5f);
  EXPECT_EQ(p.sampling.seed, ~uint64_t{0});
  EXPECT_EQ(p.n, 3);
  EXPECT_TRUE(parsed->stream);
  EXPECT_TRUE(parsed->include_usage);
  EXPECT_EQ(p.logprobs, 5);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{2}));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_FALSE(p.speculate);
}

TEST_F(OpenAiRequestTest, NullMeansDefault) {
  const auto parsed = ParseCompletionRequest(
      R"({"model": null, "prompt": "x", "max_tokens": null, "temperature": null, "n": null,
          "stop": null, "logprobs": null, "stream": null, "seed": null})",
      Model());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->params.max_tokens, 16);
  EXPECT_EQ(parsed->params.logprobs, -1);
}

TEST_F(OpenAiRequestTest, ChatUsesTheTemplate) {
  const auto parsed = ParseChatRequest(R"({
      "model": "smollm2",
      "messages": [{"role": "developer", "content": "Be brief."},
                   {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                {"type": "text", "text": "there"}]},
                   {"role": "assistant", "content": null},
                   {"role": "user", "content": "Bye"}],
      "logprobs": true, "top_logprobs": 2, "max_completion_tokens": 7, "max_tokens": 9})",
                                       Model());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->endpoint, OpenAiEndpoint::kChatCompletions);
  const auto text = chat_template_->Apply(nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi\nthere"},
      {"role": "assistant", "content": ""}, {"role": "user", "content": "Bye"}])"),
                                          nullptr, /*add_generation_prompt=*/true);
  ASSERT_TRUE(text.ok()) << text.status();
  auto expected = tokenizer_->Encode(*text, /*parse_special=*/true);
  ASSERT_TRUE(expected.ok());
  if (tokenizer_->add_bos()) expected->insert(expected->begin(), tokenizer_->bos_id());
  EXPECT_EQ(parsed->params.prompt, *expected);
  EXPECT_EQ(parsed->params.logprobs, 2);
  EXPECT_EQ(parsed->params.max_tokens, 7);  // max_completion_tokens wins
}

TEST_F(OpenAiRequestTest, ChatDefaults) {
  const auto parsed =
      ParseChatRequest(R"({"messages": [{"role": "user", "content": "Hi"}]})", Model());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->params.max_tokens, 0);  // up to the context length
  EXPECT_EQ(parsed->params.logprobs, -1);
  const auto with_logprobs = ParseChatRequest(
      R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true})", Model());
  ASSERT_TRUE(with_logprobs.ok()) << with_logprobs.status();
  EXPECT_EQ(with_logprobs->params.logprobs, 0);
}

// Tools, tool calls and tool results reach a template that renders tools (one that writes
// <tool_call>, as Qwen's) as the client sent them, key order kept; what the template refuses is
// a 400 naming messages.
TEST_F(OpenAiRequestTest, ChatPassesToolsToTheTemplate) {
  auto chat = ChatTemplate::Parse(
      "{#- calls are written <tool_call> ... -#}{% for t in tools or [] %}{{ t | tojson }}\n{% "
      "endfor %}{% for m in messages %}"
      "{{ m.role }}:{% if m.tool_calls %}{{ m.tool_calls[0].function | tojson }}{% else %}"
      "{{ m.content }}{% endif %}{% if m.tool_call_id %}@{{ m.tool_call_id }}{% endif %}{{ '\\n' }}"
      "{% endfor %}{% if kind is defined %}{{ kind }}{% endif %}"
      "{% if messages[-1].content == 'boom' %}{{ raise_exception('no boom') }}{% endif %}",
      "", "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  ServedModel model = Model();
  model.chat_template = &*chat;
  model.tool_format = DetectToolCallFormat(chat->source());
  const auto parsed = ParseChatRequest(R"({
      "messages": [{"role": "user", "content": "Weather?"},
                   {"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
                    "type": "function", "function": {"name": "w", "arguments": "{\"q\": 1}"}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
      "tools": [{"type": "function", "function": {"name": "w", "parameters": {"z": 1, "a": 2}}}],
      "tool_choice": "auto", "chat_template_kwargs": {"kind": "K"}})",
                                       model);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto expected = tokenizer_->EncodePrompt(
      "{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": "
      "{\"z\": 1, \"a\": 2}}}\nuser:Weather?\nassistant:{\"name\": \"w\", \"arguments\": "
      "\"{\\\"q\\\": 1}\"}\ntool:sunny@c1\nK");
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(parsed->params.prompt, *expected) << tokenizer_->Decode(parsed->params.prompt);

  const auto refused =
      ParseChatRequest(R"({"messages": [{"role": "user", "content": "boom"}]})", model);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(HttpStatusOf(refused.status()), 400);
  EXPECT_EQ(ErrorOf(refused.status())["param"], "messages");
  EXPECT_NE(refused.status().message().find("no boom"), std::string::npos) << refused.status();
  const std::vector<BadCase> cases = {
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", 400,
       "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", 400,
       "messages[0].tool_calls"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]})", 400,
       "messages[0].tool_calls[0].function.name"},
      {R"({"messages": [{"role": "tool", "content": "x", "tool_call_id": 3}]})", 400,
       "messages[0].tool_call_id"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", 400, "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 1})", 400,
       "chat_template_kwargs"},
  };
  for (const BadCase& c : cases) ExpectRefused(ParseChatRequest(c.body, model), c);
}

// SmolLM2's template knows nothing of tools: they are described in the system message, earlier
// calls and results written as text, and tool_choice becomes the constraint of the Hermes syntax.
TEST_F(OpenAiRequestTest, ToolsForATemplateWithoutThem) {
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
          {"type": "object", "properties": {"city": {"type": "string"}}}}}])";
  const std::string messages = R"("messages": [{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "cold"}])";
  const auto parsed = ParseChatRequest("{" + messages + "," + tools + "}", Model());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::string prompt = tokenizer_->Decode(parsed->params.prompt);
  EXPECT_NE(prompt.find("<|im_start|>system\nYou may call functions"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find(R"({"type":"function","function":{"name":"get_weather")"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
                        "\"arguments\": {\"city\":\"Oslo\"}}\n</tool_call>"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("<|im_start|>user\n<tool_response>\ncold\n</tool_response>"),
            std::string::npos)
      << prompt;
  ASSERT_TRUE(parsed->tool_syntax.has_value());
  EXPECT_EQ(*parsed->tool_syntax, ToolCallSyntax::kHermes);
  EXPECT_EQ(parsed->params.constraint.kind, OutputConstraint::Kind::kStructuralTag);
  EXPECT_EQ(parsed->params.constraint.param, "tools");  // auto

  const auto required =
      ParseChatRequest("{" + messages + "," + tools + R"(, "tool_choice": "required"})", Model());
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_EQ(required->params.constraint.param, "tool_choice");
  const auto none =
      ParseChatRequest("{" + messages + "," + tools + R"(, "tool_choice": "none"})", Model());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->tool_syntax.has_value());
  EXPECT_FALSE(none->params.constraint.active());
  EXPECT_EQ(tokenizer_->Decode(none->params.prompt).find("You may call functions"),
            std::string::npos);
}

TEST_F(OpenAiRequestTest, ChatWithoutTemplateIsRefused) {
  ServedModel model = Model();
  model.chat_template = nullptr;
  ExpectRefused(ParseChatRequest(R"({"messages": [{"role": "user", "content": "Hi"}]})", model),
                {"no template", 400, "messages"});
}

TEST(OpenAiError, StatusCodesAndBody) {
  EXPECT_EQ(HttpStatusOf(absl::InvalidArgumentError("x")), 400);
  EXPECT_EQ(HttpStatusOf(absl::NotFoundError("x")), 404);
  EXPECT_EQ(HttpStatusOf(absl::ResourceExhaustedError("x")), 429);
  EXPECT_EQ(HttpStatusOf(absl::UnavailableError("x")), 503);
  EXPECT_EQ(HttpStatusOf(absl::InternalError("x")), 500);
  EXPECT_EQ(HttpStatusOf(absl::CancelledError("x")), 500);

  const json body =
      json::parse(ErrorBody(WithParam(absl::InvalidArgumentError("too long"), "prompt")));
  EXPECT_EQ(body, json::parse(R"({"error": {"message": "too long", "type": "invalid_request_error",
                                            "param": "prompt", "code": null}})"));
  const json unavailable = json::parse(ErrorBody(absl::UnavailableError("cluster degraded")));
  EXPECT_EQ(unavailable["error"]["param"], nullptr);
  EXPECT_EQ(unavailable["error"]["message"], "cluster degraded");
}

}  // namespace
}  // namespace tpserve
