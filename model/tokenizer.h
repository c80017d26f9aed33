// The tokenizers of GGUF `tokenizer.ggml.model` "gpt2" (byte-level BPE: Llama 3, Qwen2,
// DeepSeek, GPT-2, SmolLM2) and "llama" (SentencePiece BPE: Llama 2, Mistral, TinyLlama, Phi-3),
// producing the same ids as llama.cpp's llama_tokenize(add_special = false).
//
// SentencePiece: special tokens are cut out as in step 1 below; each plain-text fragment gets a
// leading space when the vocabulary asks (tokenizer.ggml.add_space_prefix, default true) and it
// starts the text or follows a special token, its spaces become '▁', and it is encoded as
// sentencepiece_bpe.h says. Decode turns '▁' back into spaces.
//
// Byte-level BPE, Encode:
//   1. Special tokens (types control, user-defined and unknown; only user-defined when
//      `parse_special` is false) are cut out of the text first, longest token text first; each
//      occurrence becomes that token and the text around it is encoded on its own.
//   2. The pre-tokenizer (pre_tokenizer.h) splits the rest into words.
//   3. Each word's bytes are mapped to GPT-2's printable characters (byte 0x20 -> U+0120 'Ġ',
//      ...), split into those characters, and adjacent symbols are merged, lowest merge rank
//      first (leftmost on ties), until no pair of neighbours has a rank.
//   4. A final symbol that is not a token falls back to the tokens of its characters, one per
//      byte. A byte the vocabulary has no token for is dropped, as llama.cpp drops it
//      (SmolLM2 has none for 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, nor for the lead bytes
//      0xF1..0xF4 of characters from U+40000 up), so such text does not round-trip.
//
// Thread-safe: every method is const and keeps no state between calls.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/pre_tokenizer.h"

namespace tpserve {

class GgufFile;

// GGUF `tokenizer.ggml.token_type` values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class TokenizerModel {
  kByteLevelBpe,   // "gpt2"
  kSentencePiece,  // "llama"
};

// Everything the tokenizer needs, as a GGUF file stores it. -1 means "absent" for every id.
struct TokenizerData {
  TokenizerModel model = TokenizerModel::kByteLevelBpe;
  std::vector<std::string> tokens;     // [vocab_size] byte-mapped (BPE) or '▁'-escaped (SPM) text
  std::vector<TokenType> token_types;  // [vocab_size], or empty for all kNormal
  std::vector<std::string> merges;     // byte-level BPE: "left right", rank = index
  std::vector<float> scores;           // SentencePiece: [vocab_size] merge priority, or empty
  bool add_space_prefix = true;        // SentencePiece: tokenizer.ggml.add_space_prefix
  std::string pre_tokenizer;           // tokenizer.ggml.pre, e.g. "smollm"
  bool add_bos = false;                // whether callers prepend bos_id to a prompt
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  // Further ids the file names and llama.cpp counts as ending generation.
  int32_t eot_id = -1;
  int32_t eom_id = -1;
  int32_t fim_pad_id = -1;
  int32_t fim_rep_id = -1;
  int32_t fim_sep_id = -1;
  // More ids that end generation: generation_config.json's eos_token_id list beyond its first
  // (Llama-3.1 names <|end_of_text|>, <|eom_id|> and <|eot_id|>), as tpserve.eos_token_ids.
  std::vector<int32_t> more_eos_ids;
};

// GPT-2 byte-level form of raw bytes, as vocabularies of byte-level BPE store them: every byte
// becomes one printable character ("\n" → "Ċ", " " → "Ġ").
std::string MapBytes(std::string_view bytes);

class Tokenizer {
 public:
  // INVALID_ARGUMENT when the data is inconsistent (sizes, ids out of range, duplicate tokens,
  // unknown pre-tokenizer name).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(TokenizerData data);
  // Reads the tokenizer.ggml.* keys; `tokenizer.ggml.model` must be "gpt2" or "llama".
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);

  // Token ids for `text`, without BOS (see add_bos()). INVALID_ARGUMENT naming the byte offset
  // when `text` is not valid UTF-8 (overlong forms, surrogates and bytes 0xF5..0xFF included).
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool parse_special) const;
  // A prompt's token ids, as the servers take a text: special tokens parsed, and BOS first when
  // the model asks for it (add_bos()) and the text does not already start with it.
  absl::StatusOr<std::vector<int32_t>> EncodePrompt(std::string_view text) const;

  // The bytes the tokens stand for: normal tokens unmapped to bytes, byte tokens (<0xXX>) as
  // that byte, control, unknown and user-defined tokens as their text, unused and undefined
  // tokens as nothing. May end inside a UTF-8 sequence. Precondition: every id is in
  // [0, vocab_size()); check ids that come from clients first.
  std::string Decode(absl::Span<const int32_t> ids) const;
  // Decode() of one token, without a copy.
  std::string_view TokenBytes(int32_t id) const;
  // The token's text as stored in the vocabulary (byte-mapped for normal tokens).
  const std::string& TokenText(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // The token of one raw byte, if the vocabulary has one.
  std::optional<int32_t> ByteToken(uint8_t byte) const;

  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  // The most bytes of text one token stands for (its bytes, or a special token's text): a text
  // of N bytes is at least N / max_token_bytes() tokens.
  size_t max_token_bytes() const { return max_token_bytes_; }
  int32_t bos_id() const { return bos_id_; }  // -1 when the model has none
  int32_t eos_id() const { return eos_id_; }  // -1 when the model has none
  bool add_bos() const { return add_bos_; }
  // True for the ids llama.cpp stops generation at: eos, the file's eot/eom/FIM pad, repo and
  // separator ids, and tokens named like <|im_end|>, <|eot_id|>, <|endoftext|>, <|end_of_text|>;
  // and for the model's further eos ids (TokenizerData::more_eos_ids).
  bool IsEndOfGeneration(int32_t id) const { return end_of_generation_.contains(id); }
  const absl::flat_hash_set<int32_t>& end_of_generation_ids() const { return end_of_generation_; }
  const PreTokenizer& pre_tokenizer() const { return pre_tokenizer_; }
  TokenizerModel model() const { return model_; }

 private:
  Tokenizer(TokenizerData data, PreTokenizer pre_tokenizer);

  // Appends the ids of `text`, which holds no special tokens; `after_special`: it starts the
  // text or follows a special token.
  void EncodeText(std::string_view text, bool after_special, std::vector<int32_t>* ids) const;
  // Appends the ids of one pre-tokenized word given in byte-mapped form.
  void EncodeWord(const std::string& mapped, std::vector<int32_t>* ids) const;
  std::optional<int32_t> Find(std::string_view text) const;

  // Constant after construction.
  TokenizerModel model_;
  std::vector<std::string> tokens_;                        // [vocab_size]
  std::vector<float> scores_;                              // [vocab_size] SentencePiece only
  std::vector<TokenType> types_;                           // [vocab_size]
  std::vector<std::string> bytes_;                         // [vocab_size] Decode() of each token
  absl::flat_hash_map<std::string, int32_t> token_ids_;    // text -> id
  absl::flat_hash_map<std::string, int32_t> merge_ranks_;  // "left right" -> rank
  std::vector<int32_t> special_ids_;  // types control/user-defined/unknown, longest text first
  std::optional<int32_t> byte_tokens_[256];
  absl::flat_hash_set<int32_t> end_of_generation_;
  PreTokenizer pre_tokenizer_;
  int32_t bos_id_;
  int32_t eos_id_;
  bool add_bos_;
  bool add_space_prefix_;
  size_t max_token_bytes_ = 0;
};

}  // namespace tpserve
