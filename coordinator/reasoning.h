// Reasoning models (DeepSeek-R1 and its distills, Qwen3, QwQ) think between <think> and </think>
// before they answer. The server splits that thinking out of the reply: chat's
// message.reasoning_content (delta.reasoning_content when streaming), the Responses API's
// reasoning item, the Messages API's thinking block.
//
// Where the thinking starts depends on the prompt: DeepSeek-R1 distill templates end the
// generation prompt with "<think>\n", so the output is thinking from its first byte (kOpen);
// templates that leave the tag to the model (Qwen3, older R1 templates) get it at the start of the
// output (kTagged); a prompt that ends with "</think>" (Qwen3 with enable_thinking false) has
// no thinking at all (kNone).
//
// Structured output and tool calls apply after the thinking: the request's constraint is compiled
// behind it (OutputConstraint::thinking), and thinking_token_budget bounds the thinking's tokens,
// after which the grammar allows only "</think>".
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tpserve {

// --reasoning-parser: how the served model marks its thinking.
enum class ReasoningParser { kNone, kDeepSeekR1, kQwen3 };

// "none", "deepseek_r1", "qwen3", or "auto": the chat template's source decides (a template that
// handles "</think>" is a reasoning model's; Qwen3's when it reads enable_thinking).
absl::StatusOr<ReasoningParser> ResolveReasoningParser(std::string_view flag,
                                                       const std::string* template_source);
const char* ReasoningParserName(ReasoningParser parser);

inline constexpr std::string_view kThinkBegin = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";

enum class ReasoningStart { kNone, kOpen, kTagged };

// For a prompt rendered by the template of a model that `parser` describes.
ReasoningStart ReasoningStartOf(ReasoningParser parser, std::string_view prompt);

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

// Splits one sample's output as it arrives, holding back what may still be a tag. What it
// releases adds up to SplitReasoning of the whole text. The whitespace that follows </think> is
// dropped (the model separates its answer with it); thinking that never ends is all reasoning.
class ReasoningStream {
 public:
  explicit ReasoningStream(ReasoningStart start);

  ReasoningDelta Add(std::string_view text);
  ReasoningDelta Finish();

 private:
  enum class State { kBeforeTag, kThinking, kAfterThinking, kContent };
  void Step(ReasoningDelta* out);

  State state_;
  std::string buffer_;
};

ReasoningDelta SplitReasoning(ReasoningStart start, std::string_view text);

}  // namespace tpserve
