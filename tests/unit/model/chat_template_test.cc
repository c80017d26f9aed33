// Chat templates: the expected prompts are what Jinja2 renders for each template source (for
// Llama 3 with bos_token = "", since tpserve leaves BOS to the tokenizer).
#include "model/chat_template.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf_file.h"

namespace tpserve {
namespace {

// tokenizer.chat_template of the bundled SmolLM2 model.
std::string SmolLmTemplate() {
  const char* path = std::getenv("TPSERVE_MODEL_PATH");
  EXPECT_NE(path, nullptr) << "set TPSERVE_MODEL_PATH (ctest sets it)";
  if (path == nullptr) return "";
  EXPECT_TRUE(std::filesystem::exists(path))
      << "model file " << path << " is missing; it is required for the tests: run "
      << "scripts/fetch-model.sh";
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return "";
  absl::StatusOr<std::string> source = (*file)->GetString("tokenizer.chat_template");
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? *source : "";
}

constexpr char kSmolLmSystem[] =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n";

TEST(ChatTemplate, SmolLmRendersLikeJinja) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Detect(SmolLmTemplate());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->format(), ChatTemplate::Format::kChatMl);
  EXPECT_EQ(chat->default_system_prompt(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");

  const struct {
    std::vector<ChatMessage> messages;
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
    EXPECT_EQ(chat->Apply(c.messages, c.add_generation_prompt), c.expected);
  }
}

TEST(ChatTemplate, ChatMlDefaultSystemPromptInEscapedLiteral) {
  // Qwen2.5's shape: the default system turn is a literal with \n escapes, the system message
  // of the conversation a computed string.
  const std::string source =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
      "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are "
      "Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif "
      "%}{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) "
      "%}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' "
      "}}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' "
      "}}{%- endif %}";
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Detect(source);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->Apply({{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, ChatMlDefaultSystemPromptWithEscapedQuote) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Detect(
      "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou\\'re \"Smol\"."
      "<|im_end|>\\n' }}{% endif %}{% for message in messages %}{{'<|im_start|>' + "
      "message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}{% endfor %}");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->default_system_prompt(), "You're \"Smol\".");
}

TEST(ChatTemplate, PlainChatMlHasNoDefaultSystemPrompt) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Detect(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt "
      "%}{{ '<|im_start|>assistant\n' }}{% endif %}");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->default_system_prompt(), "");
  EXPECT_EQ(chat->Apply({{"user", "Hi"}}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3RendersLikeJinjaWithoutBos) {
  // Meta-Llama-3-8B-Instruct's template.
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Detect(
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
      "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
      "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->format(), ChatTemplate::Format::kLlama3);
  EXPECT_EQ(chat->Apply({{"system", "Be brief."},
                         {"user", "  Hi there\n"},
                         {"assistant", "Hello."},
                         {"user", "Bye"}},
                        true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, UnknownTemplateIsInvalidArgument) {
  for (const char* source : {"{% for m in messages %}<start_of_turn>{{ m.content }}{% endfor %}",
                             "<|im_start|>{{ m.role }}<|im_sep|>{{ m.content }}<|im_end|>", ""}) {
    absl::StatusOr<ChatTemplate> chat = ChatTemplate::Detect(source);
    ASSERT_FALSE(chat.ok()) << source;
    EXPECT_EQ(chat.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(chat.status().message().find("unsupported chat template"), std::string::npos)
        << chat.status();
  }
}

}  // namespace
}  // namespace tpserve
