// A Hugging Face model folder, as vLLM and SGLang take it for --model, opened as the GGUF file
// llama.cpp's converter would write from it: the same metadata keys and tensor names, so that
// ModelConfig, Tokenizer, the chat template and the shard loader read it as they read a GGUF
// file. Nothing is converted or copied: the tensors stay in the mapped safetensors files, and
// each rank reads only its slices.
//
// The folder holds config.json (architectures LlamaForCausalLM, MistralForCausalLM or
// Qwen2ForCausalLM), model.safetensors or model.safetensors.index.json with its shards (BF16,
// F16 or F32 tensors, or FP8 checkpoints' F8_E4M3 weights with their scales: model/hf_fp8.h),
// tokenizer.json, and optionally tokenizer_config.json (special tokens,
// add_bos_token, chat_template) and generation_config.json (bos and eos ids, the recommended
// sampling: model/sampling_defaults.h). Q/K rows stay in HF's
// order, so the view sets tpserve.rope.rotate_half (model_config.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/gguf_file.h"
#include "model/model_config.h"

namespace tpserve {

// INVALID_ARGUMENT naming the file and the field or tensor for a missing or unreadable file, an
// unsupported architecture, dtype or tokenizer, a shard the index names that is missing or
// lies outside the folder, a tensor whose shape disagrees with config.json, a layer tensor
// missing, or a truncated file.
absl::StatusOr<std::unique_ptr<GgufFile>> OpenHfFolder(const std::string& dir);

// The model's shape from the folder's config.json alone, read as OpenHfFolder reads it (no
// weights or tokenizer needed: tpctl plan sizes models not downloaded yet). vocab_size and
// tie_word_embeddings come from config.json, where the view would take them from the tensors.
absl::StatusOr<ModelConfig> HfFolderShape(const std::string& dir);

// A GGUF file, or a Hugging Face folder when `path` is a directory.
absl::StatusOr<std::unique_ptr<GgufFile>> OpenModel(const std::string& path);

}  // namespace tpserve
