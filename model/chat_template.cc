#include "model/chat_template.h"

#include <cstddef>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tpserve {
namespace {

constexpr absl::string_view kImStart = "<|im_start|>";
constexpr absl::string_view kImEnd = "<|im_end|>";

// Undoes the escapes of a Jinja string literal that matter in prompt text; other characters
// after a backslash stand for themselves.
std::string UnescapeJinjaLiteral(absl::string_view literal) {
  std::string out;
  out.reserve(literal.size());
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal[i] != '\\' || i + 1 == literal.size()) {
      out.push_back(literal[i]);
      continue;
    }
    const char escaped = literal[++i];
    out.push_back(escaped == 'n' ? '\n' : escaped == 't' ? '\t' : escaped);
  }
  return out;
}

// Position of the quote that ends a Jinja string literal whose text starts at `from`, skipping
// escaped characters; npos when there is none.
size_t ClosingQuote(absl::string_view source, size_t from, char quote) {
  for (size_t i = from; i < source.size(); ++i) {
    if (source[i] == '\\') {
      ++i;
    } else if (source[i] == quote) {
      return i;
    }
  }
  return absl::string_view::npos;
}

// The default system prompt of a ChatML template: the text of a string literal that holds a
// whole system turn, "<|im_start|>system\n{prompt}<|im_end|>". Empty when there is none.
std::string FindDefaultSystemPrompt(absl::string_view source) {
  const std::string system_turn = absl::StrCat(kImStart, "system");
  for (size_t at = source.find(system_turn); at != absl::string_view::npos;
       at = source.find(system_turn, at + 1)) {
    if (at == 0) continue;
    const char quote = source[at - 1];
    if (quote != '\'' && quote != '"') continue;  // not the start of a string literal
    size_t body = at + system_turn.size();
    if (source.substr(body, 1) == "\n") {
      body += 1;
    } else if (source.substr(body, 2) == "\\n") {
      body += 2;
    } else {
      continue;
    }
    const size_t end = source.find(kImEnd, body);
    if (end == absl::string_view::npos || ClosingQuote(source, body, quote) < end) {
      continue;  // the literal ends before <|im_end|>: a computed prompt
    }
    return UnescapeJinjaLiteral(source.substr(body, end - body));
  }
  return "";
}

// Strips ASCII whitespace at both ends, as llama.cpp's Llama-3 format does.
absl::string_view TrimAsciiWhitespace(absl::string_view text) {
  constexpr absl::string_view kWhitespace = " \t\n\v\f\r";
  const size_t begin = text.find_first_not_of(kWhitespace);
  if (begin == absl::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(kWhitespace) - begin + 1);
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Detect(std::string_view jinja_source_view) {
  // This Abseil build's string_view is its own type.
  const absl::string_view jinja_source(jinja_source_view.data(), jinja_source_view.size());
  if (absl::StrContains(jinja_source, kImStart) && absl::StrContains(jinja_source, kImEnd) &&
      !absl::StrContains(jinja_source, "<|im_sep|>")) {
    return ChatTemplate(Format::kChatMl, FindDefaultSystemPrompt(jinja_source));
  }
  if (absl::StrContains(jinja_source, "<|start_header_id|>") &&
      absl::StrContains(jinja_source, "<|end_header_id|>") &&
      absl::StrContains(jinja_source, "<|eot_id|>")) {
    return ChatTemplate(Format::kLlama3, "");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported chat template (tokenizer.chat_template): tpserve renders ChatML "
      "(<|im_start|>/<|im_end|>) and Llama 3 (<|start_header_id|>/<|end_header_id|>/<|eot_id|>); "
      "the template starts with '",
      jinja_source.substr(0, 60), "'"));
}

std::string ChatTemplate::Apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  std::string prompt;
  switch (format_) {
    case Format::kChatMl:
      if (!messages.empty() && messages[0].role != "system" && !default_system_prompt_.empty()) {
        absl::StrAppend(&prompt, kImStart, "system\n", default_system_prompt_, kImEnd, "\n");
      }
      for (const ChatMessage& message : messages) {
        absl::StrAppend(&prompt, kImStart, message.role, "\n", message.content, kImEnd, "\n");
      }
      if (add_generation_prompt) absl::StrAppend(&prompt, kImStart, "assistant\n");
      break;
    case Format::kLlama3:
      for (const ChatMessage& message : messages) {
        absl::StrAppend(&prompt, "<|start_header_id|>", message.role, "<|end_header_id|>\n\n",
                        TrimAsciiWhitespace(message.content), "<|eot_id|>");
      }
      if (add_generation_prompt) {
        absl::StrAppend(&prompt, "<|start_header_id|>assistant<|end_header_id|>\n\n");
      }
      break;
  }
  return prompt;
}

}  // namespace tpserve
