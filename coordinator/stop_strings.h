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

// Each stop string is followed by its own KMP automaton, so a piece costs its length times the
// number of stop strings, however long they are; the first stop string to complete wins (of two
// completing at the same character, the one that started first).
class StopStringMatcher {
 public:
  // Empty strings are not allowed (the engine rejects them). `include_stop`: a matched stop
  // string is released with the text before it (vLLM's include_stop_str_in_output).
  explicit StopStringMatcher(std::vector<std::string> stops, bool include_stop = false);

  struct Result {
    std::string text;      // safe to release now
    bool matched = false;  // a stop string ended in this piece: `text` stops at it
  };

  // Adds the next piece of text. After a match nothing more may be added.
  Result Add(std::string_view piece);
  // The end of the sequence: everything still held back.
  std::string Flush();
  bool matched() const { return matched_; }
  // The stop string that matched; empty before a match.
  const std::string& matched_stop() const { return matched_stop_; }

 private:
  struct Stop {
    std::string text;
    std::vector<size_t> fail;  // KMP: [i] = longest proper prefix of text[0, i] that ends it
    size_t state = 0;          // the longest prefix of `text` the text so far ends with
  };

  std::vector<Stop> stops_;
  const bool include_stop_;
  std::string held_;  // the text since the earliest partial match: a prefix of some stop string
  bool matched_ = false;
  std::string matched_stop_;
};

}  // namespace tpserve
