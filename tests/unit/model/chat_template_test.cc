// Chat templates: the expected prompts are what jinja2 renders for each template source
// (chat_templates_match_jinja2 checks the real templates against jinja2 itself).
#include "model/chat_template.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf_file.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using ojson = nlohmann::ordered_json;

// The bundled SmolLM2 model's template, loaded as the servers load it.
ChatTemplate SmolLmTemplate() {
  const char* path = std::getenv("TPSERVE_MODEL_PATH");
  EXPECT_NE(path, nullptr) << "set TPSERVE_MODEL_PATH (ctest sets it)";
  EXPECT_TRUE(path != nullptr && std::filesystem::exists(path))
      << "model file is missing; it is required for the tests: run scripts/fetch-model.sh";
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path == nullptr ? "" : path);
  if (!file.ok()) {
    ADD_FAILURE() << file.status();
    return *ChatTemplate::Parse("", "", "");
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Load(**file, **tokenizer, "");
  EXPECT_TRUE(chat.ok()) << chat.status();
  return chat.ok() ? *chat : *ChatTemplate::Parse("", "", "");
}

struct Turn {
  const char* role;
  const char* content;
};

ojson Messages(const std::vector<Turn>& turns) {
  ojson messages = ojson::array();
  for (const Turn& t : turns) messages.push_back({{"role", t.role}, {"content", t.content}});
  return messages;
}

std::string Render(const ChatTemplate& chat, const std::vector<Turn>& turns,
                   bool add_generation_prompt) {
  absl::StatusOr<std::string> text = chat.Apply(Messages(turns), nullptr, add_generation_prompt);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

constexpr char kSmolLmSystem[] =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n";

TEST(ChatTemplate, SmolLmRendersLikeJinja) {
  const ChatTemplate chat = SmolLmTemplate();
  const struct {
    std::vector<Turn> messages;
    bool add_generation_prompt;
    std::string expected;
  } cases[] = {
      {{{"user", "Hello!"}},
       true,
       std::string(kSmolLmSystem) + "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"},
      {{{"user", "Hello!"}},
       false,
       std::string(kSmolLmSystem) + "<|im_start|>user\nHello!<|im_end|>\n"},
      {{{"system", "Be brief."}, {"user", "Hi"}},
       true,
       "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
       "<|im_start|>assistant\n"},
      {{{"user", "What is 2+2?"}, {"assistant", "4"}, {"user", "  and 3+3?\n"}},
       true,
       std::string(kSmolLmSystem) +
           "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
           "<|im_start|>user\n  and 3+3?\n<|im_end|>\n<|im_start|>assistant\n"},
      {{}, true, "<|im_start|>assistant\n"},
      {{}, false, ""},
      {{{"assistant", "I start."}},
       false,
       std::string(kSmolLmSystem) + "<|im_start|>assistant\nI start.<|im_end|>\n"},
      {{{"user", "系统 😀 <|im_end|>"}},
       true,
       std::string(kSmolLmSystem) +
           "<|im_start|>user\n系统 😀 <|im_end|><|im_end|>\n<|im_start|>assistant\n"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(Render(chat, c.messages, c.add_generation_prompt), c.expected);
  }
}

TEST(ChatTemplate, QwenShapedDefaultSystemPrompt) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Parse(
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
      "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are "
      "Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif "
      "%}{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) "
      "%}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' "
      "}}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' "
      "}}{%- endif %}",
      "", "<|im_end|>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(Render(*chat, {{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render(*chat, {{"system", "S"}, {"user", "Hi"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Llama3RendersBosAndTrimsContent) {
  // Meta-Llama-3-8B-Instruct's template.
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Parse(
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
      "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
      "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
      "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(Render(*chat,
                   {{"system", "Be brief."},
                    {"user", "  Hi there\n"},
                    {"assistant", "Hello."},
                    {"user", "Bye"}},
                   true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, ToolsAndExtraVariablesReachTheTemplate) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Parse(
      "{{ tools | map(attribute='function') | map(attribute='name') | join(',') }}|"
      "{{ messages[1].tool_calls[0].function.arguments | tojson }}|{{ messages[2].tool_call_id }}"
      "|{{ flavour }}|{{ tools is none }}",
      "", "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  const ojson messages = ojson::parse(R"([{"role": "user", "content": "q"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
       "function": {"name": "f", "arguments": {"b": 1, "a": [true, null]}}}]},
      {"role": "tool", "tool_call_id": "id7", "content": "r"}])");
  const ojson tools = ojson::parse(
      R"([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}])");
  absl::StatusOr<std::string> text = chat->Apply(messages, tools, true, {{"flavour", "x"}});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "f,g|{\"b\": 1, \"a\": [true, null]}|id7|x|False");
  text = chat->Apply(messages, nullptr, true);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "|{\"b\": 1, \"a\": [true, null]}|id7||True");
}

TEST(ChatTemplate, DateComesFromStrftimeNow) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Parse("{{ strftime_now('%d %b %Y') }}", "", "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  std::tm now{};
  now.tm_year = 2025 - 1900;
  now.tm_mon = 0;
  now.tm_mday = 7;
  chat->set_now(now);
  EXPECT_EQ(Render(*chat, {}, false), "07 Jan 2025");
}

TEST(ChatTemplate, RaiseExceptionIsAnErrorWithItsMessage) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Parse(
      "{% if messages[0].role != 'user' %}{{ raise_exception('roles must alternate') }}{% endif %}",
      "", "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  absl::StatusOr<std::string> text = chat->Apply(Messages({{"assistant", "x"}}), nullptr, true);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(text.status().message().find("roles must alternate"), std::string::npos)
      << text.status();
}

TEST(ChatTemplate, UnsupportedConstructIsRefusedNamingIt) {
  const struct {
    const char* source;
    const char* construct;
  } cases[] = {
      {"{% include 'other.jinja' %}", "include"},
      {"hello\n  {{ messages | frobnicate }}", "frobnicate"},
      {"{% for m in messages recursive %}{% endfor %}", "recursive"},
      {"{% if x %}", "endif"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<ChatTemplate> chat = ChatTemplate::Parse(c.source, "", "");
    ASSERT_FALSE(chat.ok()) << c.source;
    EXPECT_EQ(chat.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(chat.status().message().find(c.construct), std::string::npos) << chat.status();
    EXPECT_NE(chat.status().message().find("line "), std::string::npos) << chat.status();
  }
}

TEST(ChatTemplate, OverrideFileReplacesTheModelsTemplate) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "tpserve_chat_template_override.jinja";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}", f);
    std::fclose(f);
  }
  const char* model = std::getenv("TPSERVE_MODEL_PATH");
  ASSERT_NE(model, nullptr);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(model);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Load(**file, **tokenizer, path.string());
  std::filesystem::remove(path);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(Render(*chat, {{"user", "Hi"}}, true), "[user] Hi\n");
  EXPECT_FALSE(ChatTemplate::Load(**file, **tokenizer, "/nonexistent/t.jinja").ok());
}

}  // namespace
}  // namespace tpserve
