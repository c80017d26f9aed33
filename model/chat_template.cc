#include "model/chat_template.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

std::string TokenTextOr(const Tokenizer& tokenizer, int32_t id) {
  if (id < 0 || id >= tokenizer.vocab_size()) return "";
  return std::string(tokenizer.TokenBytes(id));
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source, std::string bos_token,
                                                 std::string eos_token) {
  absl::StatusOr<jinja::Template> parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", parsed.status().message()));
  }
  return ChatTemplate(*std::move(parsed), std::string(source), std::move(bos_token),
                      std::move(eos_token));
}

absl::StatusOr<ChatTemplate> ChatTemplate::Load(const GgufFile& file, const Tokenizer& tokenizer,
                                                const std::string& override_path) {
  std::string source;
  if (!override_path.empty()) {
    std::ifstream in(override_path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", override_path));
    std::ostringstream text;
    text << in.rdbuf();
    source = text.str();
  } else {
    absl::StatusOr<std::string> from_file = file.GetString("tokenizer.chat_template");
    if (!from_file.ok()) {
      return absl::NotFoundError("the model has no tokenizer.chat_template");
    }
    source = *std::move(from_file);
  }
  return Parse(source, TokenTextOr(tokenizer, tokenizer.bos_id()),
               TokenTextOr(tokenizer, tokenizer.eos_id()));
}

absl::StatusOr<std::string> ChatTemplate::Apply(
    const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
    bool add_generation_prompt, const nlohmann::ordered_json& extra_variables) const {
  jinja::ValueDict variables;
  if (extra_variables.is_object()) {
    for (const auto& [name, value] : extra_variables.items()) {
      variables.Set(name, jinja::Value::FromJson(value));
    }
  }
  variables.Set("messages", jinja::Value::FromJson(messages));
  variables.Set("tools", jinja::Value::FromJson(tools));
  variables.Set("add_generation_prompt", jinja::Value::Bool(add_generation_prompt));
  if (variables.Find("bos_token") == nullptr) {
    variables.Set("bos_token", jinja::Value::String(bos_token_));
  }
  if (variables.Find("eos_token") == nullptr) {
    variables.Set("eos_token", jinja::Value::String(eos_token_));
  }
  absl::StatusOr<std::string> text = template_.Render(variables, options_);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", text.status().message()));
  }
  return text;
}

absl::StatusOr<std::string> ChatTemplate::ApplyUserPrompt(const std::string& prompt) const {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", prompt}});
  return Apply(messages, nullptr, /*add_generation_prompt=*/true);
}

}  // namespace tpserve
