// Renders a conversation into prompt text with the model's own chat template: the Jinja source
// of the GGUF's `tokenizer.chat_template` (or a file that overrides it), run by tp_jinja as
// Hugging Face transformers' apply_chat_template runs it (model/jinja/template.h).
//
// The template sees what transformers passes: `messages` (role, content — a string, or the
// OpenAI content-parts list as given —, tool_calls, tool_call_id, name, as given), `tools`
// (the OpenAI tools array, or none), `add_generation_prompt`, `bos_token`, `eos_token`, plus
// any extra variables. The rendered text may start with the BOS token's text; the tokenizer's
// EncodePrompt does not add a second one.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/gguf_file.h"
#include "model/jinja/template.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tpserve {

class ChatTemplate {
 public:
  // INVALID_ARGUMENT naming the construct, line and column the interpreter cannot run.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source, std::string bos_token,
                                            std::string eos_token);
  // The template of `override_path` when it is not empty, else the file's
  // tokenizer.chat_template (NOT_FOUND when it has none); the special tokens from `tokenizer`.
  static absl::StatusOr<ChatTemplate> Load(const GgufFile& file, const Tokenizer& tokenizer,
                                           const std::string& override_path);

  // `messages`: an array of message objects; `tools`: an array, or null for none;
  // `extra_variables`: an object (or null) whose members become template variables.
  // INVALID_ARGUMENT when the template fails or refuses (raise_exception) the conversation.
  absl::StatusOr<std::string> Apply(const nlohmann::ordered_json& messages,
                                    const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                    const nlohmann::ordered_json& extra_variables = nullptr) const;
  // One user message and the generation prompt, as the command-line tools send.
  absl::StatusOr<std::string> ApplyUserPrompt(const std::string& prompt) const;

  // The Jinja source, for what it says about the family (coordinator/tool_calls.h).
  const std::string& source() const { return source_; }

  // What strftime_now formats (Llama 3.1's date line); unset: the local time of each call.
  void set_now(const std::tm& now) { options_.now = now; }

 private:
  ChatTemplate(jinja::Template parsed, std::string source, std::string bos_token,
               std::string eos_token)
      : template_(std::move(parsed)),
        source_(std::move(source)),
        bos_token_(std::move(bos_token)),
        eos_token_(std::move(eos_token)) {}

  jinja::Template template_;
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  jinja::RenderOptions options_;
};

}  // namespace tpserve
