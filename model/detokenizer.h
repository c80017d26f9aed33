// Streams generated tokens out as text, one token at a time, so that every piece handed to a
// client is complete UTF-8.
//
// A token can end inside a multi-byte character (byte tokens, or BPE pieces that split a
// character); those bytes wait for the following tokens. Bytes that can never become a
// character (a lone continuation byte, 0xC0, 0xC1, 0xF5..0xFF, overlong and surrogate forms, a
// lead byte followed by a non-continuation byte) become U+FFFD, one per maximal ill-formed
// subpart as the Unicode standard recommends, so a model that emits garbage cannot stall the
// stream. When Tokenizer::Decode(all ids) is valid UTF-8, the concatenation of every Add() result
// and Flush() equals it.
//
// Not thread-safe: one instance per generated sequence.
#pragma once

#include <cstdint>
#include <string>

#include "model/tokenizer.h"

namespace tpserve {

class IncrementalDetokenizer {
 public:
  // `tokenizer` is not owned and must outlive this object. `skip_special`: control tokens (BOS,
  // EOS, <|im_start|>, ...) leave no text, as vLLM's skip_special_tokens.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Appends token `id` (in [0, vocab_size)) and returns the text that is now complete; empty
  // while a character is still incomplete.
  std::string Add(int32_t id);
  // Ends the sequence: returns what is still held back, an incomplete character as U+FFFD.
  // The detokenizer is empty afterwards and can start a new sequence.
  std::string Flush();

 private:
  // Moves the complete characters at the front of pending_ to the result; at the end of the
  // sequence (`final`) an incomplete tail is emitted as U+FFFD instead of held back.
  std::string Drain(bool final);

  const Tokenizer& tokenizer_;
  const bool skip_special_;
  std::string pending_;  // bytes received but not yet returned; at most 3 between calls
};

}  // namespace tpserve
