// SentencePiece's BPE encoding (GGUF `tokenizer.ggml.model` = "llama": Llama-2, Mistral,
// TinyLlama, Phi-3), as llama.cpp and Hugging Face's slow tokenizer run it:
//
//   1. The text, spaces already escaped to U+2581 '▁', is split into UTF-8 characters.
//   2. Of all adjacent pairs whose concatenation is a vocabulary token, the one whose token has
//      the highest score merges first (leftmost on ties); repeat until no pair forms a token.
//   3. Each symbol left is its token; one that is not a token (a character outside the
//      vocabulary) becomes its bytes' <0xXX> tokens ("byte fallback"); a byte without one is
//      dropped.
//
// Unlike byte-level BPE there is no merge list: the scores order the merges.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

namespace tpserve {

class SentencePieceVocabulary {
 public:
  virtual ~SentencePieceVocabulary() = default;
  virtual std::optional<int32_t> Find(std::string_view text) const = 0;
  virtual float Score(int32_t id) const = 0;
  virtual std::optional<int32_t> ByteToken(uint8_t byte) const = 0;
};

// Appends the ids of `escaped` (spaces as '▁'). Precondition: valid UTF-8.
void EncodeSentencePiece(std::string_view escaped, const SentencePieceVocabulary& vocabulary,
                         std::vector<int32_t>* ids);

// `text` with every ' ' replaced by "▁" (U+2581), as SentencePiece stores spaces.
std::string EscapeSpaces(std::string_view text);

}  // namespace tpserve
