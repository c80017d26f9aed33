#include "coordinator/tool_call_parser.h"

#include "absl/strings/ascii.h"
#include "common/json_depth.h"
#include "coordinator/stop_strings.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::json;

size_t SkipSpace(std::string_view text, size_t i) {
  while (i < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[i]))) ++i;
  return i;
}

// A call object, {"name": "f", "<arguments_key>" or "arguments": {...}}, into `call`.
bool CallFromObject(const json& object, const char* arguments_key, ParsedToolCall* call) {
  if (!object.is_object()) return false;
  const auto name = object.find("name");
  auto arguments = object.find(arguments_key);
  if (arguments == object.end()) arguments = object.find("arguments");
  if (name == object.end() || !name->is_string() || arguments == object.end()) return false;
  call->name = name->get<std::string>();
  call->arguments = arguments->is_string() ? arguments->get<std::string>() : arguments->dump();
  return true;
}

// The JSON value ('{' or '[') at text[start]: its end, 0 while it is unfinished, npos when none
// starts there.
size_t ValueEnd(std::string_view text, size_t start, char open) {
  if (start == text.size()) return 0;
  if (text[start] != open) return std::string::npos;
  const size_t end = JsonValueEnd(text, start);
  return end == std::string_view::npos ? 0 : end;
}

// Hermes: <tool_call> {call} </tool_call>.
size_t HermesCall(std::string_view text, size_t trigger, std::vector<ParsedToolCall>* calls) {
  const size_t start = SkipSpace(text, trigger);
  const size_t object_end = ValueEnd(text, start, '{');
  if (object_end == 0 || object_end == std::string::npos) return object_end;
  constexpr std::string_view kClose = "</tool_call>";
  size_t end = SkipSpace(text, object_end);
  const std::string_view rest = text.substr(end);
  if (rest.size() < kClose.size()) {
    return kClose.substr(0, rest.size()) == rest ? 0 : std::string::npos;
  }
  if (rest.substr(0, kClose.size()) != kClose) return std::string::npos;
  ParsedToolCall call;
  if (!CallFromObject(ParseBoundedJson<json>(text.substr(start, object_end - start)), "arguments",
                      &call)) {
    return std::string::npos;
  }
  calls->push_back(std::move(call));
  return end + kClose.size();
}

// Llama-3.1: {"name": "f", "parameters": {...}}, the trigger being its opening.
size_t Llama3Call(std::string_view text, std::vector<ParsedToolCall>* calls) {
  const size_t end = ValueEnd(text, 0, '{');
  if (end == 0 || end == std::string::npos) return end;
  ParsedToolCall call;
  if (!CallFromObject(ParseBoundedJson<json>(text.substr(0, end)), "parameters", &call)) {
    return std::string::npos;
  }
  calls->push_back(std::move(call));
  return end;
}

// Mistral Nemo: [TOOL_CALLS] [{call}, {call}, ...].
size_t MistralJsonCalls(std::string_view text, size_t trigger, std::vector<ParsedToolCall>* calls) {
  const size_t start = SkipSpace(text, trigger);
  const size_t end = ValueEnd(text, start, '[');
  if (end == 0 || end == std::string::npos) return end;
  const json list = ParseBoundedJson<json>(text.substr(start, end - start));
  if (!list.is_array() || list.empty()) return std::string::npos;
  std::vector<ParsedToolCall> parsed(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    if (!CallFromObject(list[i], "arguments", &parsed[i])) return std::string::npos;
  }
  for (ParsedToolCall& call : parsed) calls->push_back(std::move(call));
  return end;
}

// Mistral Small 3.2, Devstral: [TOOL_CALLS]name[ARGS]{arguments}.
size_t MistralArgsCall(std::string_view text, size_t trigger, std::vector<ParsedToolCall>* calls) {
  constexpr std::string_view kArgs = "[ARGS]";
  constexpr size_t kMaxName = 256;
  size_t i = trigger;
  while (i < text.size() && i - trigger <= kMaxName &&
         (absl::ascii_isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_' ||
          text[i] == '-' || text[i] == '.')) {
    ++i;
  }
  if (i - trigger > kMaxName) return std::string::npos;
  const std::string_view rest = text.substr(i);
  if (rest.size() < kArgs.size()) {
    return kArgs.substr(0, rest.size()) == rest ? 0 : std::string::npos;
  }
  if (i == trigger || rest.substr(0, kArgs.size()) != kArgs) return std::string::npos;
  const size_t start = SkipSpace(text, i + kArgs.size());
  const size_t end = ValueEnd(text, start, '{');
  if (end == 0 || end == std::string::npos) return end;
  const json arguments = ParseBoundedJson<json>(text.substr(start, end - start));
  if (!arguments.is_object()) return std::string::npos;
  calls->push_back(
      ParsedToolCall{std::string(text.substr(trigger, i - trigger)), arguments.dump()});
  return end;
}

}  // namespace

ToolCallStream::ToolCallStream(ToolCallSyntax syntax)
    : syntax_(syntax), trigger_(ToolCallTrigger(syntax)) {}

size_t ToolCallStream::ParseCalls(std::vector<ParsedToolCall>* calls) const {
  const std::string_view text = buffer_;
  switch (syntax_) {
    case ToolCallSyntax::kHermes:
      return HermesCall(text, trigger_.size(), calls);
    case ToolCallSyntax::kLlama3Json:
      return Llama3Call(text, calls);
    case ToolCallSyntax::kMistralJson:
      return MistralJsonCalls(text, trigger_.size(), calls);
    case ToolCallSyntax::kMistralArgs:
      return MistralArgsCall(text, trigger_.size(), calls);
  }
  return std::string::npos;
}

void ToolCallStream::Release(std::string_view text, ToolCallDelta* out) {
  if (!content_started_) {
    const size_t first = SkipSpace(text, 0);
    text.remove_prefix(first);
    if (text.empty()) return;
  }
  size_t last = text.size();
  while (last > 0 && absl::ascii_isspace(static_cast<unsigned char>(text[last - 1]))) --last;
  if (last == 0) {
    held_space_.append(text);
    return;
  }
  out->content.append(held_space_);
  out->content.append(text.substr(0, last));
  held_space_.assign(text.substr(last));
  content_started_ = true;
}

ToolCallDelta ToolCallStream::Add(std::string_view text) {
  ToolCallDelta out;
  buffer_.append(text);
  while (!buffer_.empty()) {
    const size_t at = buffer_.find(trigger_);
    if (at != 0) {
      // Text up to a call, or up to what may yet begin one.
      const size_t keep = at == std::string::npos ? PartialMatchLength(buffer_, trigger_) : 0;
      const size_t release = at == std::string::npos ? buffer_.size() - keep : at;
      Release(std::string_view(buffer_).substr(0, release), &out);
      buffer_.erase(0, release);
      if (at == std::string::npos) break;
      continue;
    }
    std::vector<ParsedToolCall> calls;
    const size_t end = ParseCalls(&calls);
    if (end == 0) break;  // unfinished
    if (end == std::string::npos) {
      // Not a call after all: its opening is text.
      Release(std::string_view(buffer_).substr(0, trigger_.size()), &out);
      buffer_.erase(0, trigger_.size());
      continue;
    }
    for (ParsedToolCall& call : calls) out.calls.push_back(std::move(call));
    buffer_.erase(0, end);
  }
  return out;
}

ToolCallDelta ToolCallStream::Finish() {
  ToolCallDelta out;
  Release(buffer_, &out);
  buffer_.clear();
  held_space_.clear();
  return out;
}

ToolCallDelta ParseToolCalls(ToolCallSyntax syntax, std::string_view text) {
  ToolCallStream stream(syntax);
  ToolCallDelta all = stream.Add(text);
  ToolCallDelta tail = stream.Finish();
  all.content += tail.content;
  return all;
}

}  // namespace tpserve
