#include "coordinator/output_processor.h"

#include <utility>

namespace tpserve {

OutputProcessor::OutputProcessor(const Tokenizer& tokenizer, const GenerateParams& params)
    : min_tokens_(params.min_tokens),
      detokenizer_(tokenizer, params.skip_special_tokens),
      stop_(params.stop, params.include_stop_str_in_output) {}

bool OutputProcessor::Process(SequenceUpdate& update) {
  if (update.tokens.empty()) return false;
  // Generated tokens before this update's first; the sampled ones after a match are dropped.
  const int32_t before = update.tokens.front().position - 1;
  for (size_t i = 0; i < update.tokens.size(); ++i) {
    SequenceUpdate::Token& token = update.tokens[i];
    std::string piece = detokenizer_.Add(token.id);
    if (token.position <= min_tokens_) {
      token.text = std::move(piece);
      continue;
    }
    StopStringMatcher::Result text = stop_.Add(piece);
    token.text = std::move(text.text);
    if (!text.matched) continue;
    update.tokens.resize(i + 1);
    update.num_sampled = token.position - before;
    return true;
  }
  return false;
}

std::string OutputProcessor::Flush() {
  if (stop_.matched()) return "";
  StopStringMatcher::Result tail = stop_.Add(detokenizer_.Flush());
  if (!tail.matched) tail.text += stop_.Flush();
  return std::move(tail.text);
}

}  // namespace tpserve
