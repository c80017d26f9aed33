// Renders a conversation into prompt text in the chat format of the model.
//
// tpserve does not run Jinja. Detect() recognises the format of a GGUF `tokenizer.chat_template`
// by its distinctive markers, and Apply() renders that format in C++:
//
//   ChatML   ("<|im_start|>", "<|im_end|>"; SmolLM2, Qwen):
//              <|im_start|>{role}\n{content}<|im_end|>\n ...   then <|im_start|>assistant\n
//            When the template writes a literal system turn ('<|im_start|>system\n...<|im_end|>')
//            it is the default system prompt: it is rendered before the first message unless
//            that message is a system one (SmolLM2: "You are a helpful AI assistant named
//            SmolLM, trained by Hugging Face"). This matches what Jinja renders for SmolLM2's
//            template byte for byte, also for an empty conversation (no system turn).
//   Llama 3  ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"):
//              <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> ...
//              then <|start_header_id|>assistant<|end_header_id|>\n\n
//            with content trimmed of ASCII whitespace, as llama.cpp's built-in Llama-3 format
//            does. Llama 3.1's date header and tool prompts are not rendered.
//
// The rendered text never includes BOS: tokenize it with parse_special and prepend
// Tokenizer::bos_id() when Tokenizer::add_bos() says so.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

class ChatTemplate {
 public:
  enum class Format { kChatMl, kLlama3 };

  // INVALID_ARGUMENT when the source matches no supported format.
  static absl::StatusOr<ChatTemplate> Detect(std::string_view jinja_source);

  std::string Apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  Format format() const { return format_; }
  // ChatML only: the system prompt rendered when the conversation starts without one; empty
  // when the template has none.
  const std::string& default_system_prompt() const { return default_system_prompt_; }

 private:
  ChatTemplate(Format format, std::string default_system_prompt)
      : format_(format), default_system_prompt_(std::move(default_system_prompt)) {}

  Format format_;
  std::string default_system_prompt_;
};

}  // namespace tpserve
