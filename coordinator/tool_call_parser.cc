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

}  // namespace

ToolCallStream::ToolCallStream(ToolCallSyntax syntax)
    : syntax_(syntax), trigger_(ToolCallTrigger(syntax)) {}

size_t ToolCallStream::ParseCall(ParsedToolCall* call) const {
  const std::string_view text = buffer_;
  size_t start = 0;
  if (syntax_ == ToolCallSyntax::kHermes) {
    start = SkipSpace(text, trigger_.size());
    if (start == text.size()) return 0;
  }
  if (text[start] != '{') return std::string::npos;
  const size_t object_end = JsonValueEnd(text, start);
  if (object_end == std::string_view::npos) return 0;
  size_t end = object_end;
  if (syntax_ == ToolCallSyntax::kHermes) {
    constexpr std::string_view kClose = "</tool_call>";
    end = SkipSpace(text, object_end);
    const std::string_view rest = text.substr(end);
    if (rest.size() < kClose.size()) {
      return kClose.substr(0, rest.size()) == rest ? 0 : std::string::npos;
    }
    if (rest.substr(0, kClose.size()) != kClose) return std::string::npos;
    end += kClose.size();
  }
  const json object = ParseBoundedJson<json>(text.substr(start, object_end - start));
  if (!object.is_object()) return std::string::npos;
  const auto name = object.find("name");
  auto arguments = object.find(syntax_ == ToolCallSyntax::kHermes ? "arguments" : "parameters");
  if (arguments == object.end()) arguments = object.find("arguments");
  if (name == object.end() || !name->is_string() || arguments == object.end()) {
    return std::string::npos;
  }
  call->name = name->get<std::string>();
  call->arguments = arguments->is_string() ? arguments->get<std::string>() : arguments->dump();
  return end;
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
    ParsedToolCall call;
    const size_t end = ParseCall(&call);
    if (end == 0) break;  // unfinished
    if (end == std::string::npos) {
      // Not a call after all: its opening is text.
      Release(std::string_view(buffer_).substr(0, trigger_.size()), &out);
      buffer_.erase(0, trigger_.size());
      continue;
    }
    out.calls.push_back(std::move(call));
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
