#include "model/hf_tokenizer.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/json_field.h"
#include "model/tokenizer.h"

namespace tpserve {
namespace {

using nlohmann::json;

// The split regexes of the byte-level pre-tokenizers recognised besides GPT-2's own (which
// ByteLevel applies with use_regex), as their tokenizer.json files spell them.
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5's: Qwen2's with combining marks in letter runs.
constexpr std::string_view kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Above any real vocabulary (the largest have about 256K tokens), below what a crafted embedding
// shape could make the padding allocate.
constexpr int64_t kMaxVocabulary = int64_t{1} << 22;

absl::Status Error(absl::string_view file, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", what));
}

// `node` cut to a short line for an error message.
std::string Compact(const json& node) {
  std::string text = node.dump(-1, ' ', /*ensure_ascii=*/true);
  if (text.size() > 160) text = text.substr(0, 160) + "...";
  return text;
}

// A Sequence's steps, or the one step.
std::vector<json> Steps(const json& node) {
  if (node.is_object() && node.value("type", "") == "Sequence") {
    for (const char* field : {"pretokenizers", "normalizers"}) {
      if (node.contains(field) && node[field].is_array()) {
        return node[field].get<std::vector<json>>();
      }
    }
  }
  if (node.is_object()) return {node};
  return {};
}

bool IsType(const json& step, std::string_view type) {
  return step.is_object() && step.value("type", "") == type;
}

// The byte-level pre-tokenizer's llama.cpp name, from tokenizer.json's pre_tokenizer.
absl::StatusOr<std::string> ByteLevelPreTokenizer(const json& pre) {
  const std::vector<json> steps = Steps(pre);
  const auto byte_level = [&](size_t i, bool use_regex) {
    return i < steps.size() && IsType(steps[i], "ByteLevel") &&
           steps[i].value("use_regex", true) == use_regex;
  };
  const auto split = [&](size_t i, std::string_view regex) {
    if (i >= steps.size() || !IsType(steps[i], "Split")) return false;
    const json& pattern = JsonField(steps[i], "pattern");
    return pattern.is_object() && pattern.value("Regex", "") == regex;
  };
  if (steps.size() == 1 && byte_level(0, true)) return "gpt-2";
  if (steps.size() == 2 && IsType(steps[0], "Digits") &&
      steps[0].value("individual_digits", false) && byte_level(1, true)) {
    return "smollm";
  }
  if (steps.size() == 2 && split(0, kLlama3Regex) && byte_level(1, false)) return "llama-bpe";
  if (steps.size() == 2 && split(0, kQwen2Regex) && byte_level(1, false)) return "qwen2";
  if (steps.size() == 2 && split(0, kQwen35Regex) && byte_level(1, false)) return "qwen35";
  return Error("tokenizer.json",
               absl::StrCat("pre_tokenizer ", Compact(pre),
                            " is not one tpserve knows (GPT-2's ByteLevel, SmolLM's Digits + "
                            "ByteLevel, the Llama-3, Qwen2 and Qwen3.5 regex Splits + ByteLevel)"));
}

// Whether a SentencePiece-style tokenizer puts "▁" before the text: a Prepend("▁") normalizer
// or a Metaspace pre-tokenizer that prepends.
bool AddsSpacePrefix(const json& tokenizer) {
  for (const json& step : Steps(JsonField(tokenizer, "normalizer"))) {
    if (IsType(step, "Prepend")) return true;
  }
  for (const json& step : Steps(JsonField(tokenizer, "pre_tokenizer"))) {
    if (IsType(step, "Metaspace")) {
      return step.value("prepend_scheme", "always") != "never" &&
             step.value("add_prefix_space", true);
    }
  }
  return false;
}

bool IsSentencePieceStyle(const json& tokenizer) {
  for (const char* part : {"normalizer", "pre_tokenizer"}) {
    for (const json& step : Steps(JsonField(tokenizer, part))) {
      if (IsType(step, "Metaspace")) return true;
      if (IsType(step, "Replace") && step.value("content", "") == "\u2581") return true;
    }
  }
  return false;
}

// A special token's text from tokenizer_config.json: a string or an AddedToken object.
std::optional<std::string> TokenText(const json& config, const char* field) {
  if (!config.is_object() || !config.contains(field)) return std::nullopt;
  const json& value = config[field];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return std::nullopt;
}

// The first id of generation_config.json's `field` (an id or a list of ids).
std::optional<int64_t> GenerationId(const json& generation, const char* field) {
  if (!generation.is_object() || !generation.contains(field)) return std::nullopt;
  const json& value = generation[field];
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_array() && !value.empty() && value[0].is_number_integer()) {
    return value[0].get<int64_t>();
  }
  return std::nullopt;
}

// Whether encoding starts with a special token (TemplateProcessing's "single", alone or in a
// Sequence): how a tokenizer.json without add_bos_token in its config says "add BOS".
bool PostProcessorAddsBos(const json& tokenizer) {
  const json& post = JsonField(tokenizer, "post_processor");
  std::vector<json> steps = {post};
  if (IsType(post, "Sequence") && post.contains("processors") && post["processors"].is_array()) {
    steps = post["processors"].get<std::vector<json>>();
  }
  for (const json& step : steps) {
    if (!IsType(step, "TemplateProcessing")) continue;
    const json& single = JsonField(step, "single");
    return single.is_array() && !single.empty() && single[0].is_object() &&
           single[0].contains("SpecialToken");
  }
  return false;
}

absl::Status AddKeys(const json& tokenizer, const json& config, const json& generation,
                     int64_t vocab_rows, GgufWriter* keys) {
  if (!tokenizer.is_object()) return Error("tokenizer.json", "is not a JSON object");
  const json& model = JsonField(tokenizer, "model");
  if (!model.is_object() || model.value("type", "") != "BPE") {
    return Error(
        "tokenizer.json",
        absl::StrCat("model ", Compact(model.is_object() ? JsonField(model, "type") : model),
                     " is not supported (BPE is)"));
  }
  const json& vocab = JsonField(model, "vocab");
  if (!vocab.is_object()) return Error("tokenizer.json", "model.vocab is not an object");
  if (vocab_rows > kMaxVocabulary) {
    return Error("tokenizer.json",
                 absl::StrCat("the embedding's ", vocab_rows, " rows exceed the ", kMaxVocabulary,
                              " tokens a vocabulary may have here"));
  }

  std::vector<std::optional<std::string>> tokens(vocab_rows);
  std::vector<int32_t> types(vocab_rows, static_cast<int32_t>(TokenType::kNormal));
  absl::flat_hash_map<std::string, int64_t> ids;
  const auto place = [&](const std::string& text, const json& id, TokenType type) -> absl::Status {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_rows) {
      return Error("tokenizer.json",
                   absl::StrCat("token ", Compact(json(text)), " has id ", Compact(id),
                                ", outside the embedding's ", vocab_rows, " rows"));
    }
    const int64_t i = id.get<int64_t>();
    tokens[i] = text;
    types[i] = static_cast<int32_t>(type);
    ids[text] = i;
    return absl::OkStatus();
  };
  for (const auto& [text, id] : vocab.items()) RETURN_IF_ERROR(place(text, id, TokenType::kNormal));
  const json& added = JsonField(tokenizer, "added_tokens");
  for (const json& token : added.is_array() ? added : json::array()) {
    if (!token.is_object() || !token.contains("content") || !token["content"].is_string()) {
      return Error("tokenizer.json",
                   absl::StrCat("added token ", Compact(token), " has no content"));
    }
    RETURN_IF_ERROR(
        place(token["content"].get<std::string>(), JsonField(token, "id"),
              token.value("special", false) ? TokenType::kControl : TokenType::kUserDefined));
  }

  const bool sentencepiece = IsSentencePieceStyle(tokenizer);
  std::vector<std::string> merges;
  for (const json& merge : JsonField(model, "merges")) {
    if (merge.is_string()) {
      merges.push_back(merge.get<std::string>());
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      merges.push_back(absl::StrCat(merge[0].get<std::string>(), " ", merge[1].get<std::string>()));
    } else {
      return Error("tokenizer.json",
                   absl::StrCat("merge ", Compact(merge), " is neither \"a b\" nor [a, b]"));
    }
  }
  if (sentencepiece) {
    keys->SetString("tokenizer.ggml.model", "llama");
    // SentencePiece BPE merges the pair whose result scores highest; HF's BPE the pair of lowest
    // merge rank. A token made by merge r scores -r; tokens no merge makes score below all.
    std::vector<float> scores(vocab_rows, -1e9f);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      std::string merged = merges[rank];
      const size_t space = merged.find(' ', 1);
      if (space == std::string::npos) continue;
      merged.erase(space, 1);
      const auto it = ids.find(merged);
      if (it != ids.end() && scores[it->second] == -1e9f) {
        scores[it->second] = -static_cast<float>(rank);
      }
    }
    for (int64_t i = 0; i < vocab_rows; ++i) {
      const std::string& text = tokens[i].value_or("");
      if (text.size() == 6 && text.rfind("<0x", 0) == 0 && text.back() == '>') {
        types[i] = static_cast<int32_t>(TokenType::kByte);
      }
    }
    if (const json& unk = JsonField(model, "unk_token"); unk.is_string()) {
      if (const auto it = ids.find(unk.get<std::string>()); it != ids.end()) {
        types[it->second] = static_cast<int32_t>(TokenType::kUnknown);
      }
    }
    keys->SetFloat32Array("tokenizer.ggml.scores", scores);
    keys->SetBool("tokenizer.ggml.add_space_prefix", AddsSpacePrefix(tokenizer));
  } else {
    ASSIGN_OR_RETURN(const std::string pre,
                     ByteLevelPreTokenizer(JsonField(tokenizer, "pre_tokenizer")));
    keys->SetString("tokenizer.ggml.model", "gpt2");
    keys->SetString("tokenizer.ggml.pre", pre);
    keys->SetStringArray("tokenizer.ggml.merges", merges);
  }

  std::vector<std::string> texts;
  texts.reserve(vocab_rows);
  for (int64_t i = 0; i < vocab_rows; ++i) {
    if (tokens[i].has_value()) {
      texts.push_back(*tokens[i]);
    } else {
      texts.push_back(absl::StrCat("[PAD", i, "]"));
      types[i] = static_cast<int32_t>(TokenType::kUnused);
    }
  }
  keys->SetStringArray("tokenizer.ggml.tokens", texts);
  keys->SetInt32Array("tokenizer.ggml.token_type", types);

  const auto set_id = [&](const char* field, const char* key) -> absl::Status {
    std::optional<int64_t> id;
    if (const std::optional<std::string> text = TokenText(config, field)) {
      const auto it = ids.find(*text);
      if (it == ids.end()) {
        return Error("tokenizer_config.json",
                     absl::StrCat(field, " ", Compact(json(*text)), " is not in the vocabulary"));
      }
      id = it->second;
    } else {
      id = GenerationId(generation, absl::StrCat(field, "_id").c_str());
    }
    if (!id.has_value()) return absl::OkStatus();
    if (*id < 0 || *id >= vocab_rows) {
      return Error("generation_config.json",
                   absl::StrCat(field, "_id ", *id, " is outside the vocabulary"));
    }
    keys->SetUint32(key, static_cast<uint32_t>(*id));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(set_id("bos_token", "tokenizer.ggml.bos_token_id"));
  RETURN_IF_ERROR(set_id("eos_token", "tokenizer.ggml.eos_token_id"));
  // Every id generation_config.json lists ends generation, as in transformers and vLLM; the
  // first alone would miss Llama-3.1's <|eot_id|>.
  if (generation.is_object() && generation.contains("eos_token_id")) {
    const json& listed = generation["eos_token_id"];
    std::vector<int32_t> eos_ids;
    for (const json& id : listed.is_array() ? listed : json::array({listed})) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_rows) {
        return Error("generation_config.json",
                     absl::StrCat("eos_token_id ", Compact(id), " is not an id in the vocabulary"));
      }
      eos_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    keys->SetInt32Array("tpserve.eos_token_ids", eos_ids);
  }
  if (config.is_object() && config.contains("add_bos_token") &&
      config["add_bos_token"].is_boolean()) {
    keys->SetBool("tokenizer.ggml.add_bos_token", config["add_bos_token"].get<bool>());
  } else {
    keys->SetBool("tokenizer.ggml.add_bos_token", PostProcessorAddsBos(tokenizer));
  }

  if (config.is_object() && config.contains("chat_template")) {
    const json& chat = config["chat_template"];
    if (chat.is_string()) {
      keys->SetString("tokenizer.chat_template", chat.get<std::string>());
    } else if (chat.is_array()) {
      // Named templates (tool_use, rag, ...): the one named "default" is the chat template.
      for (const json& named : chat) {
        if (named.is_object() && named.value("name", "") == "default" &&
            named.contains("template") && named["template"].is_string()) {
          keys->SetString("tokenizer.chat_template", named["template"].get<std::string>());
        }
      }
    } else {
      return Error("tokenizer_config.json", "chat_template is neither a string nor a list");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AddHfTokenizerKeys(const json& tokenizer, const json& config, const json& generation,
                                int64_t vocab_rows, GgufWriter* keys) {
  // json::value() throws when a field holds another type than the default's: such a file is
  // refused like any other malformed one.
  try {
    return AddKeys(tokenizer, config, generation, vocab_rows, keys);
  } catch (const std::exception& e) {
    return Error("tokenizer.json or tokenizer_config.json",
                 absl::StrCat("a field has an unexpected type (", e.what(), ")"));
  }
}

}  // namespace tpserve
