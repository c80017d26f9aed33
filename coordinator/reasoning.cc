#include "coordinator/reasoning.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "coordinator/stop_strings.h"

namespace tpserve {
namespace {

size_t SkipSpace(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[i]))) ++i;
  return i;
}

}  // namespace

absl::StatusOr<ReasoningParser> ResolveReasoningParser(std::string_view flag,
                                                       const std::string* template_source) {
  if (flag == "none") return ReasoningParser::kNone;
  if (flag == "deepseek_r1") return ReasoningParser::kDeepSeekR1;
  if (flag == "qwen3") return ReasoningParser::kQwen3;
  if (flag != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("--reasoning-parser ", std::string(flag),
                                                   ": unknown parser; use none, auto, deepseek_r1 "
                                                   "or qwen3"));
  }
  if (template_source == nullptr || template_source->find(kThinkEnd) == std::string::npos) {
    return ReasoningParser::kNone;
  }
  return template_source->find("enable_thinking") != std::string::npos
             ? ReasoningParser::kQwen3
             : ReasoningParser::kDeepSeekR1;
}

const char* ReasoningParserName(ReasoningParser parser) {
  switch (parser) {
    case ReasoningParser::kNone:
      return "none";
    case ReasoningParser::kDeepSeekR1:
      return "deepseek_r1";
    case ReasoningParser::kQwen3:
      return "qwen3";
  }
  return "none";
}

ReasoningStart ReasoningStartOf(ReasoningParser parser, std::string_view prompt) {
  if (parser == ReasoningParser::kNone) return ReasoningStart::kNone;
  std::string_view trimmed = prompt;
  while (!trimmed.empty() && absl::ascii_isspace(static_cast<unsigned char>(trimmed.back()))) {
    trimmed.remove_suffix(1);
  }
  if (trimmed.ends_with(kThinkEnd)) return ReasoningStart::kNone;
  if (trimmed.ends_with(kThinkBegin)) return ReasoningStart::kOpen;
  return ReasoningStart::kTagged;
}

ReasoningStream::ReasoningStream(ReasoningStart start)
    : state_(start == ReasoningStart::kNone   ? State::kContent
             : start == ReasoningStart::kOpen ? State::kThinking
                                              : State::kBeforeTag) {}

void ReasoningStream::Step(ReasoningDelta* out) {
  while (!buffer_.empty()) {
    switch (state_) {
      case State::kBeforeTag: {
        const std::string_view rest = std::string_view(buffer_).substr(SkipSpace(buffer_));
        if (rest.starts_with(kThinkBegin)) {
          buffer_.erase(0, buffer_.size() - rest.size() + kThinkBegin.size());
          state_ = State::kThinking;
          continue;
        }
        // Still possibly the tag: wait for more.
        if (kThinkBegin.starts_with(rest)) return;
        state_ = State::kContent;
        continue;
      }
      case State::kThinking: {
        const size_t end = buffer_.find(kThinkEnd);
        if (end == std::string::npos) {
          const size_t keep = PartialMatchLength(buffer_, kThinkEnd);
          out->reasoning.append(buffer_, 0, buffer_.size() - keep);
          buffer_.erase(0, buffer_.size() - keep);
          return;
        }
        out->reasoning.append(buffer_, 0, end);
        buffer_.erase(0, end + kThinkEnd.size());
        state_ = State::kAfterThinking;
        continue;
      }
      case State::kAfterThinking: {
        const size_t space = SkipSpace(buffer_);
        buffer_.erase(0, space);
        if (!buffer_.empty()) state_ = State::kContent;
        continue;
      }
      case State::kContent:
        out->content.append(buffer_);
        buffer_.clear();
        return;
    }
  }
}

ReasoningDelta ReasoningStream::Add(std::string_view text) {
  ReasoningDelta out;
  buffer_.append(text);
  Step(&out);
  return out;
}

ReasoningDelta ReasoningStream::Finish() {
  ReasoningDelta out;
  if (state_ == State::kThinking) {
    out.reasoning = std::move(buffer_);
  } else if (state_ == State::kBeforeTag) {
    out.content = std::move(buffer_);
  }
  buffer_.clear();
  return out;
}

ReasoningDelta SplitReasoning(ReasoningStart start, std::string_view text) {
  ReasoningStream stream(start);
  ReasoningDelta all = stream.Add(text);
  ReasoningDelta tail = stream.Finish();
  all.reasoning += tail.reasoning;
  all.content += tail.content;
  return all;
}

}  // namespace tpserve
