// A Generate sample's text, kept apart from the scheduler (which deals in token ids and blocks):
// its tokens detokenized as they come, stop strings searched in the text from min_tokens on, and
// the text that may still begin one held back. The engine runs it on each step's updates right
// after Scheduler::Postprocess, on the engine thread.
#pragma once

#include <string>

#include "coordinator/sequence.h"
#include "coordinator/step_outcome.h"
#include "coordinator/stop_strings.h"
#include "model/detokenizer.h"
#include "model/tokenizer.h"

namespace tpserve {

class OutputProcessor {
 public:
  // `tokenizer` must outlive this.
  OutputProcessor(const Tokenizer& tokenizer, const GenerateParams& params);

  // Gives each of `update`'s tokens its text. When a stop string ends in one, the tokens after it
  // are dropped from `update` (and from its num_sampled) and this returns true: the sample ends
  // with that token.
  bool Process(SequenceUpdate& update);
  // At the sample's end: the text still held back (bytes of an incomplete character, the start
  // of a stop string that never completed), unless a stop string ended it.
  std::string Flush();

 private:
  const int32_t min_tokens_;
  IncrementalDetokenizer detokenizer_;
  StopStringMatcher stop_;
};

}  // namespace tpserve
