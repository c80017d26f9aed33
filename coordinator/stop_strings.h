// Finds stop strings in generated text that arrives piece by piece (one detokenized token at a
// time), so that a stop string split across tokens is still found and never reaches the client.
//
// Text that could be the beginning of a stop string is held back until the next pieces show
// whether it is; everything before it is released at once.
//
// Not thread-safe: one instance per generated sequence.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tpserve {

// The length of the longest suffix of `text` that is a proper prefix of `pattern`: text that must
// be held back, since the next piece may complete `pattern` (also ToolCallStream's call openings).
size_t PartialMatchLength(std::string_view text, std::string_view pattern);

class StopStringMatcher {
 public:
  // Empty strings are not allowed (the engine rejects them).
  explicit StopStringMatcher(std::vector<std::string> stops);

  struct Result {
    std::string text;      // safe to release now
    bool matched = false;  // a stop string ended in this piece: `text` stops right before it
  };

  // Adds the next piece of text. After a match nothing more may be added.
  Result Add(std::string_view piece);
  // The end of the sequence: everything still held back.
  std::string Flush();
  bool matched() const { return matched_; }

 private:
  const std::vector<std::string> stops_;
  std::string held_;  // a suffix of the text so far that is a proper prefix of some stop string
  bool matched_ = false;
};

}  // namespace tpserve
