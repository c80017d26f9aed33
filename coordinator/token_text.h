// A Generate sample's text as the scheduler sees it: it hands each token over as it appends it
// and learns whether a stop string ended the sample there, without knowing how text is made.
// The engine's OutputProcessor (detokenizer, stop strings) implements it.
#pragma once

#include <cstdint>
#include <string>

namespace tpserve {

class TokenText {
 public:
  virtual ~TokenText() = default;
  // The text `token` releases, the sample's `position`-th generated token (text that may begin
  // a stop string is held back); true when a stop string ends in it.
  virtual bool Add(int32_t token, int32_t position, std::string* text) = 0;
  // At the sample's end: the text still held back, unless a stop string ended it.
  virtual std::string Flush() = 0;
  // The stop string that ended the sample (Anthropic's stop_sequence); empty if none did.
  virtual std::string MatchedStop() const = 0;
};

}  // namespace tpserve
