// A Generate sample's text, kept apart from the scheduler (which deals in token ids and blocks and
// sees only TokenText): its tokens detokenized as they come, stop strings searched in the text
// from min_tokens on, and the text that may still begin one held back.
#pragma once

#include <string>

#include "coordinator/sequence.h"
#include "coordinator/stop_strings.h"
#include "coordinator/token_text.h"
#include "model/detokenizer.h"
#include "model/tokenizer.h"

namespace tpserve {

class OutputProcessor final : public TokenText {
 public:
  // `tokenizer` must outlive this.
  OutputProcessor(const Tokenizer& tokenizer, const GenerateParams& params);

  bool Add(int32_t token, int32_t position, std::string* text) override;
  std::string Flush() override;
  std::string MatchedStop() const override { return stop_.matched_stop(); }

 private:
  const int32_t min_tokens_;
  IncrementalDetokenizer detokenizer_;
  StopStringMatcher stop_;
};

}  // namespace tpserve
