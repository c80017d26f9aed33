// A Hugging Face tokenizer (tokenizer.json, tokenizer_config.json, generation_config.json) as the
// tokenizer.* keys llama.cpp's converter writes from it, so that Tokenizer::FromGguf and the chat
// template read a Hugging Face folder as they read a GGUF file.
//
// tokenizer.json's model must be BPE, either byte-level (a ByteLevel pre-tokenizer: Llama-3,
// Qwen2/2.5, SmolLM2, GPT-2; tokenizer.ggml.model "gpt2") or SentencePiece-style (byte_fallback
// with a Metaspace pre-tokenizer or a "▁" normalizer: Llama-2, Mistral, TinyLlama; "llama").
// Byte-level pre-tokenizers are recognised by their structure and regex (see hf_tokenizer.cc);
// anything else is refused naming what was found.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "model/gguf_writer.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// Sets tokenizer.ggml.{model, pre, tokens, token_type, merges | scores, add_space_prefix,
// bos_token_id, eos_token_id, add_bos_token}, tokenizer.chat_template and tpserve.eos_token_ids
// (every id generation_config.json's eos_token_id lists) on `keys`. `config`
// and `generation` are the parsed tokenizer_config.json and generation_config.json, or null
// where the folder has none. The vocabulary is padded with "[PAD<id>]" tokens to `vocab_rows`,
// the embedding's rows, as llama.cpp's converter does. INVALID_ARGUMENT naming the file and
// field otherwise.
absl::Status AddHfTokenizerKeys(const nlohmann::json& tokenizer, const nlohmann::json& config,
                                const nlohmann::json& generation, int64_t vocab_rows,
                                GgufWriter* keys);

}  // namespace tpserve
