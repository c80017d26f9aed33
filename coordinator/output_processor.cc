#include "coordinator/output_processor.h"

#include <utility>

namespace tpserve {

OutputProcessor::OutputProcessor(const Tokenizer& tokenizer, const GenerateParams& params)
    : min_tokens_(params.min_tokens),
      detokenizer_(tokenizer, params.skip_special_tokens),
      stop_(params.stop, params.include_stop_str_in_output) {}

bool OutputProcessor::Add(int32_t token, int32_t position, std::string* text) {
  std::string piece = detokenizer_.Add(token);
  if (position <= min_tokens_) {
    *text = std::move(piece);
    return false;
  }
  StopStringMatcher::Result released = stop_.Add(piece);
  *text = std::move(released.text);
  return released.matched;
}

std::string OutputProcessor::Flush() {
  if (stop_.matched()) return "";
  StopStringMatcher::Result tail = stop_.Add(detokenizer_.Flush());
  if (!tail.matched) tail.text += stop_.Flush();
  return std::move(tail.text);
}

}  // namespace tpserve
