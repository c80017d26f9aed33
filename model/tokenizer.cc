#include "model/tokenizer.h"

#include <unicode/utf8.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "model/gguf_file.h"
#include "model/sentencepiece_bpe.h"
#include "model/symbol_merge.h"

namespace tpserve {
namespace {

// GPT-2's byte <-> character mapping: the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF
// stand for themselves; the other 68 bytes, in increasing order, become U+0100..U+0143.
constexpr UChar32 kFirstShifted = 0x100;

UChar32 ByteToCodePoint(uint8_t byte) {
  if (byte <= 0x20) return kFirstShifted + byte;                                // 33 bytes
  if (byte >= 0x7F && byte <= 0xA0) return kFirstShifted + 33 + (byte - 0x7F);  // 34 bytes
  if (byte == 0xAD) return kFirstShifted + 67;
  return byte;
}

// The byte a mapped character stands for, or nullopt for characters outside the mapping.
std::optional<uint8_t> CodePointToByte(UChar32 c) {
  if (c < 0) return std::nullopt;  // ill-formed UTF-8
  if (c < kFirstShifted) {
    const bool shifted = c <= 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD;
    if (shifted) return std::nullopt;
    return static_cast<uint8_t>(c);
  }
  const UChar32 index = c - kFirstShifted;
  if (index < 33) return static_cast<uint8_t>(index);
  if (index < 67) return static_cast<uint8_t>(0x7F + index - 33);
  if (index == 67) return uint8_t{0xAD};
  return std::nullopt;
}

// The public API takes std::string_view; this Abseil build's string_view is its own type.
absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

void AppendCodePoint(UChar32 c, std::string* out) {
  uint8_t buffer[U8_MAX_LENGTH];
  int32_t length = 0;
  U8_APPEND_UNSAFE(buffer, length, c);
  out->append(reinterpret_cast<const char*>(buffer), length);
}

absl::Status ValidateUtf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t length = static_cast<int32_t>(text.size());
  int32_t i = 0;
  while (i < length) {
    const int32_t start = i;
    UChar32 c;
    U8_NEXT(bytes, i, length, c);
    if (c < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "text is not valid UTF-8: byte 0x%02X at byte offset %d does not start a complete "
          "character",
          bytes[start], start));
    }
  }
  return absl::OkStatus();
}

// Token text llama.cpp treats as ending generation, whatever the token's stored type.
constexpr std::string_view kEndOfGenerationNames[] = {
    "<|eot_id|>",      "<|eom_id|>",    "<|im_end|>",
    "<|end|>",         "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>",         "<end_of_utterance>",
};
// FIM pad, repository and file-separator tokens, looked up by name when the file gives no id;
// llama.cpp also ends generation at them.
constexpr std::string_view kFimPadNames[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"};
constexpr std::string_view kFimRepNames[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                             "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepNames[] = {"<|file_sep|>"};

bool IsSpecialType(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined ||
         type == TokenType::kUnknown;
}

constexpr char kEscapedSpace[] = "\xE2\x96\x81";  // U+2581

// Decode() of one token; see the contract in tokenizer.h.
std::string TokenBytesFor(const std::string& text, TokenType type, TokenizerModel model) {
  switch (type) {
    case TokenType::kNormal: {
      if (model == TokenizerModel::kSentencePiece) {
        return absl::StrReplaceAll(text, {{kEscapedSpace, " "}});
      }
      std::string bytes;
      const auto* data = reinterpret_cast<const uint8_t*>(text.data());
      const int32_t length = static_cast<int32_t>(text.size());
      int32_t i = 0;
      while (i < length) {
        const int32_t start = i;
        UChar32 c;
        U8_NEXT(data, i, length, c);
        if (const std::optional<uint8_t> byte = CodePointToByte(c)) {
          bytes.push_back(static_cast<char>(*byte));
        } else {
          // Not a mapped character or not UTF-8 (llama.cpp prints an [UNK_BYTE_..] marker):
          // keep the bytes as they are.
          bytes.append(text, start, i - start);
        }
      }
      return bytes;
    }
    case TokenType::kByte: {
      unsigned value = 0;
      std::sscanf(text.c_str() + 3, "%2x", &value);  // format checked in Create()
      return std::string(1, static_cast<char>(value));
    }
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUserDefined:
      return text;
    case TokenType::kUnused:
    case TokenType::kUndefined:
      return "";
  }
  return "";
}

bool IsByteTokenText(const std::string& text) {
  return text.size() == 6 && text.compare(0, 3, "<0x") == 0 &&
         std::isxdigit(static_cast<unsigned char>(text[3])) &&
         std::isxdigit(static_cast<unsigned char>(text[4])) && text[5] == '>';
}

}  // namespace

std::string MapBytes(std::string_view bytes) {
  std::string mapped;
  mapped.reserve(bytes.size() * 2);
  for (const char byte : bytes) {
    AppendCodePoint(ByteToCodePoint(static_cast<uint8_t>(byte)), &mapped);
  }
  return mapped;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(TokenizerData data) {
  ASSIGN_OR_RETURN(PreTokenizer pre_tokenizer, PreTokenizer::Create(data.pre_tokenizer));
  const size_t n = data.tokens.size();
  if (n == 0) return absl::InvalidArgumentError("tokenizer: the vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("tokenizer: the vocabulary has more than 2^31 tokens");
  }
  if (data.token_types.empty()) data.token_types.assign(n, TokenType::kNormal);
  if (data.token_types.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", data.token_types.size(), " token types for ", n, " tokens"));
  }
  if (data.model == TokenizerModel::kSentencePiece) {
    if (data.scores.empty()) data.scores.assign(n, 0.0f);
    if (data.scores.size() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer: ", data.scores.size(), " token scores for ", n, " tokens"));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    // As llama.cpp does, so that every token has text that can be found.
    if (data.tokens[i].empty()) data.tokens[i] = absl::StrCat("[EMPTY_", i, "]");
    if (data.token_types[i] == TokenType::kByte && !IsByteTokenText(data.tokens[i])) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: token ", i, " '", data.tokens[i],
                                                     "' has the byte type but is not <0xXX>"));
    }
  }
  const std::pair<const char*, int32_t> ids[] = {
      {"bos", data.bos_id},         {"eos", data.eos_id},         {"eot", data.eot_id},
      {"eom", data.eom_id},         {"fim_pad", data.fim_pad_id}, {"fim_rep", data.fim_rep_id},
      {"fim_sep", data.fim_sep_id},
  };
  for (const auto& [name, id] : ids) {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer: ", name, " token id ", id, " is outside the vocabulary of ", n));
    }
  }
  for (const int32_t id : data.more_eos_ids) {
    if (id < 0 || id >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer: eos token id ", id, " is outside the vocabulary of ", n));
    }
  }
  absl::flat_hash_set<absl::string_view> seen;
  for (size_t i = 0; i < n; ++i) {
    if (!seen.insert(data.tokens[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer: token ", i, " '", data.tokens[i], "' appears twice"));
    }
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(data), std::move(pre_tokenizer)));
}

Tokenizer::Tokenizer(TokenizerData data, PreTokenizer pre_tokenizer)
    : model_(data.model),
      tokens_(std::move(data.tokens)),
      scores_(std::move(data.scores)),
      types_(std::move(data.token_types)),
      pre_tokenizer_(std::move(pre_tokenizer)),
      bos_id_(data.bos_id),
      eos_id_(data.eos_id),
      add_bos_(data.add_bos),
      add_space_prefix_(data.add_space_prefix) {
  const int32_t n = vocab_size();
  token_ids_.reserve(n);
  for (int32_t id = 0; id < n; ++id) token_ids_.emplace(tokens_[id], id);

  // End of generation, as llama.cpp decides it. Tokens found by name become control tokens
  // (llama.cpp overrides their type too), so that Encode matches them as special tokens.
  auto mark_by_name = [&](absl::Span<const std::string_view> names) {
    for (const std::string_view name : names) {
      if (const std::optional<int32_t> id = Find(name)) {
        end_of_generation_.insert(*id);
        if (!IsSpecialType(types_[*id])) types_[*id] = TokenType::kControl;
      }
    }
  };
  mark_by_name(kEndOfGenerationNames);
  const std::pair<int32_t, absl::Span<const std::string_view>> fim[] = {
      {data.fim_pad_id, kFimPadNames},
      {data.fim_rep_id, kFimRepNames},
      {data.fim_sep_id, kFimSepNames},
  };
  for (const auto& [id, names] : fim) {
    if (id < 0) mark_by_name(names);
  }
  for (const int32_t id :
       {data.eos_id, data.eot_id, data.eom_id, data.fim_pad_id, data.fim_rep_id, data.fim_sep_id}) {
    if (id >= 0) end_of_generation_.insert(id);
  }
  end_of_generation_.insert(data.more_eos_ids.begin(), data.more_eos_ids.end());

  bytes_.reserve(n);
  for (int32_t id = 0; id < n; ++id) {
    bytes_.push_back(TokenBytesFor(tokens_[id], types_[id], model_));
    // An empty special token would match everywhere without consuming text: it is never
    // matched in text (its id stays in the vocabulary).
    if (IsSpecialType(types_[id]) && !tokens_[id].empty()) special_ids_.push_back(id);
  }
  // Longest first, so that a special token inside a longer one never splits it.
  std::stable_sort(special_ids_.begin(), special_ids_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });

  for (int byte = 0; byte < 256; ++byte) {
    if (model_ == TokenizerModel::kSentencePiece) {
      byte_tokens_[byte] = Find(absl::StrFormat("<0x%02X>", byte));
      continue;
    }
    std::string mapped;
    AppendCodePoint(ByteToCodePoint(static_cast<uint8_t>(byte)), &mapped);
    byte_tokens_[byte] = Find(mapped);
  }

  // A merge "left right" splits at the first space after its first character, as llama.cpp
  // reads it; since byte-mapped text never holds a space, the line itself is the lookup key.
  // The first of two equal lines keeps its rank. Lines without a space never apply.
  merge_ranks_.reserve(data.merges.size());
  for (size_t rank = 0; rank < data.merges.size(); ++rank) {
    std::string& merge = data.merges[rank];
    if (merge.find(' ', 1) == std::string::npos) continue;
    merge_ranks_.emplace(std::move(merge), static_cast<int32_t>(rank));
  }
  for (int32_t id = 0; id < n; ++id) {
    max_token_bytes_ = std::max(max_token_bytes_, std::max(tokens_[id].size(), bytes_[id].size()));
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  ASSIGN_OR_RETURN(const std::string model, file.GetString("tokenizer.ggml.model"));
  TokenizerData data;
  if (model == "gpt2") {
    data.model = TokenizerModel::kByteLevelBpe;
  } else if (model == "llama") {
    data.model = TokenizerModel::kSentencePiece;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.ggml.model '", model,
        "' is not supported: tpserve implements byte-level BPE ('gpt2') and SentencePiece BPE "
        "('llama')"));
  }
  ASSIGN_OR_RETURN(data.tokens, file.GetStringArray("tokenizer.ggml.tokens"));
  if (data.model == TokenizerModel::kByteLevelBpe) {
    ASSIGN_OR_RETURN(data.merges, file.GetStringArray("tokenizer.ggml.merges"));
  } else {
    absl::StatusOr<std::vector<double>> scores = file.GetFloatArray("tokenizer.ggml.scores");
    if (scores.ok()) {
      data.scores.assign(scores->begin(), scores->end());
    } else if (!absl::IsNotFound(scores.status())) {
      return scores.status();
    }
    absl::StatusOr<bool> space_prefix = file.GetBool("tokenizer.ggml.add_space_prefix");
    if (space_prefix.ok()) {
      data.add_space_prefix = *space_prefix;
    } else if (!absl::IsNotFound(space_prefix.status())) {
      return space_prefix.status();
    }
  }

  absl::StatusOr<std::vector<int64_t>> types = file.GetIntArray("tokenizer.ggml.token_type");
  if (types.ok()) {
    data.token_types.reserve(types->size());
    for (const int64_t type : *types) {
      // Values outside the enum are undefined tokens, as in llama.cpp.
      data.token_types.push_back(type >= 0 && type <= 6 ? static_cast<TokenType>(type)
                                                        : TokenType::kUndefined);
    }
  } else if (!absl::IsNotFound(types.status())) {
    return types.status();
  }

  // A file without a pre-tokenizer name gets llama.cpp's "default".
  absl::StatusOr<std::string> pre = file.GetString("tokenizer.ggml.pre");
  if (pre.ok()) {
    data.pre_tokenizer = *std::move(pre);
  } else if (absl::IsNotFound(pre.status())) {
    data.pre_tokenizer = "default";
  } else {
    return pre.status();
  }

  // Optional ids: an absent key leaves -1; any other error is returned.
  auto optional_id = [&](std::string_view key, int32_t* id) -> absl::Status {
    absl::StatusOr<uint64_t> value = file.GetUint(key);
    if (absl::IsNotFound(value.status())) return absl::OkStatus();
    if (!value.ok()) return value.status();
    if (*value >= data.tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          View(key), " = ", *value, " is outside the vocabulary of ", data.tokens.size()));
    }
    *id = static_cast<int32_t>(*value);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(optional_id("tokenizer.ggml.bos_token_id", &data.bos_id));
  RETURN_IF_ERROR(optional_id("tokenizer.ggml.eos_token_id", &data.eos_id));
  RETURN_IF_ERROR(optional_id("tokenizer.ggml.eot_token_id", &data.eot_id));
  RETURN_IF_ERROR(optional_id("tokenizer.ggml.eom_token_id", &data.eom_id));
  RETURN_IF_ERROR(optional_id("tokenizer.ggml.fim_pad_token_id", &data.fim_pad_id));
  RETURN_IF_ERROR(optional_id("tokenizer.ggml.fim_rep_token_id", &data.fim_rep_id));
  RETURN_IF_ERROR(optional_id("tokenizer.ggml.fim_sep_token_id", &data.fim_sep_id));
  absl::StatusOr<std::vector<int64_t>> more_eos = file.GetIntArray("tpserve.eos_token_ids");
  if (more_eos.ok()) {
    for (const int64_t id : *more_eos) {
      if (id < 0 || id >= static_cast<int64_t>(data.tokens.size())) {
        return absl::InvalidArgumentError(absl::StrCat("tpserve.eos_token_ids holds ", id,
                                                       ", outside the vocabulary of ",
                                                       data.tokens.size()));
      }
      data.more_eos_ids.push_back(static_cast<int32_t>(id));
    }
  } else if (!absl::IsNotFound(more_eos.status())) {
    return more_eos.status();
  }

  absl::StatusOr<bool> add_bos = file.GetBool("tokenizer.ggml.add_bos_token");
  if (add_bos.ok()) {
    data.add_bos = *add_bos;
  } else if (absl::IsNotFound(add_bos.status())) {
    // llama.cpp's defaults: SentencePiece vocabularies start with BOS, BPE ones by name.
    ASSIGN_OR_RETURN(const PreTokenizer pre_tokenizer, PreTokenizer::Create(data.pre_tokenizer));
    data.add_bos =
        data.model == TokenizerModel::kSentencePiece || pre_tokenizer.adds_bos_by_default();
  } else {
    return add_bos.status();
  }
  return Create(std::move(data));
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::EncodePrompt(std::string_view text) const {
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, Encode(text, /*parse_special=*/true));
  if (add_bos_ && bos_id_ >= 0 && (ids.empty() || ids.front() != bos_id_)) {
    ids.insert(ids.begin(), bos_id_);
  }
  return ids;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       bool parse_special) const {
  RETURN_IF_ERROR(ValidateUtf8(text));
  // No fragment at all, so SentencePiece adds no space prefix either.
  if (text.empty()) return std::vector<int32_t>{};

  // The text as fragments [begin, end) that are plain text (token -1) or one special token.
  struct Fragment {
    size_t begin;
    size_t end;
    int32_t token;
  };
  std::vector<Fragment> fragments = {{0, text.size(), -1}};
  std::vector<Fragment> next;
  for (const int32_t id : special_ids_) {
    if (!parse_special && types_[id] != TokenType::kUserDefined) continue;
    const std::string& special = tokens_[id];
    next.clear();
    for (const Fragment& fragment : fragments) {
      if (fragment.token >= 0) {
        next.push_back(fragment);
        continue;
      }
      const std::string_view region = text.substr(0, fragment.end);
      size_t begin = fragment.begin;
      for (size_t match = region.find(special, begin); match != std::string_view::npos;
           match = region.find(special, begin)) {
        if (match > begin) next.push_back({begin, match, -1});
        next.push_back({match, match + special.size(), id});
        begin = match + special.size();
      }
      if (begin < fragment.end) next.push_back({begin, fragment.end, -1});
    }
    fragments.swap(next);
  }

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  bool after_special = true;
  for (const Fragment& fragment : fragments) {
    if (fragment.token >= 0) {
      ids.push_back(fragment.token);
      after_special = true;
    } else {
      EncodeText(text.substr(fragment.begin, fragment.end - fragment.begin), after_special, &ids);
      after_special = false;
    }
  }
  return ids;
}

namespace {

class SpmVocabulary : public SentencePieceVocabulary {
 public:
  SpmVocabulary(const absl::flat_hash_map<std::string, int32_t>& ids,
                const std::vector<float>& scores, const std::optional<int32_t>* byte_tokens)
      : ids_(ids), scores_(scores), byte_tokens_(byte_tokens) {}
  std::optional<int32_t> Find(std::string_view text) const override {
    const auto it = ids_.find(View(text));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  float Score(int32_t id) const override { return scores_[id]; }
  std::optional<int32_t> ByteToken(uint8_t byte) const override { return byte_tokens_[byte]; }

 private:
  const absl::flat_hash_map<std::string, int32_t>& ids_;
  const std::vector<float>& scores_;
  const std::optional<int32_t>* byte_tokens_;
};

}  // namespace

void Tokenizer::EncodeText(std::string_view text, bool after_special,
                           std::vector<int32_t>* ids) const {
  if (model_ == TokenizerModel::kSentencePiece) {
    const std::string prefixed =
        add_space_prefix_ && after_special ? absl::StrCat(" ", View(text)) : std::string(text);
    EncodeSentencePiece(EscapeSpaces(prefixed), SpmVocabulary(token_ids_, scores_, byte_tokens_),
                        ids);
    return;
  }
  for (const std::string_view word : pre_tokenizer_.Split(text)) {
    const std::string mapped = MapBytes(word);
    if (pre_tokenizer_.ignore_merges()) {
      if (const std::optional<int32_t> id = Find(mapped)) {
        ids->push_back(*id);
        continue;
      }
    }
    EncodeWord(mapped, ids);
  }
}

void Tokenizer::EncodeWord(const std::string& mapped, std::vector<int32_t>* ids) const {
  std::string key;  // "left right", reused
  auto priority = [&](std::string_view left, std::string_view right) -> std::optional<int32_t> {
    key.assign(left);
    key.push_back(' ');
    key.append(right);
    const auto it = merge_ranks_.find(key);
    if (it == merge_ranks_.end()) return std::nullopt;
    return it->second;
  };
  MergeSymbols<int32_t>(mapped, priority, [&](std::string_view symbol) {
    if (const std::optional<int32_t> id = Find(symbol)) {
      ids->push_back(*id);
      return;
    }
    // Not a token: one token per character, that is per byte; bytes without one are dropped.
    // (llama.cpp looks up each raw byte of the mapped text instead, which finds only ASCII; the
    // two agree whenever every merge result is a token, as in SmolLM2.)
    for (int32_t j = 0; j < static_cast<int32_t>(symbol.size());) {
      const int32_t begin = j;
      U8_FWD_1_UNSAFE(symbol.data(), j);
      if (const std::optional<int32_t> id = Find(symbol.substr(begin, j - begin))) {
        ids->push_back(*id);
      }
    }
  });
}

std::optional<int32_t> Tokenizer::Find(std::string_view text) const {
  const auto it = token_ids_.find(View(text));
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string text;
  for (const int32_t id : ids) text.append(TokenBytes(id));
  return text;
}

std::string_view Tokenizer::TokenBytes(int32_t id) const {
  TP_CHECK(id >= 0 && id < vocab_size());
  return bytes_[id];
}

const std::string& Tokenizer::TokenText(int32_t id) const {
  TP_CHECK(id >= 0 && id < vocab_size());
  return tokens_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  TP_CHECK(id >= 0 && id < vocab_size());
  return types_[id];
}

std::optional<int32_t> Tokenizer::ByteToken(uint8_t byte) const { return byte_tokens_[byte]; }

}  // namespace tpserve
