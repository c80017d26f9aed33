// tpserve-mkmodel: writes a random-weight Llama-family GGUF of a chosen shape.
#include <cstdio>
#include <map>
#include <string>

#include "CLI/CLI.hpp"
#include "model/synthetic_model.h"

int main(int argc, char** argv) {
  tpserve::SyntheticModelSpec spec;
  std::string output;
  std::string dtype = "f32";
  CLI::App app{"Write a random-weight Llama or Qwen2 model as GGUF"};
  app.add_option("--output", output, "GGUF file to write")->required();
  app.add_option("--layers", spec.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--hidden", spec.hidden, "embedding width")->check(CLI::PositiveNumber);
  app.add_option("--heads", spec.heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--kv-heads", spec.kv_heads, "key/value heads")->check(CLI::PositiveNumber);
  app.add_option("--ffn", spec.ffn, "MLP intermediate width")->check(CLI::PositiveNumber);
  app.add_option("--vocab", spec.vocab, "vocabulary size (>= 259)")->check(CLI::PositiveNumber);
  app.add_option("--vocab-from", spec.vocab_from,
                 "GGUF file whose tokenizer (vocabulary, merges, special tokens, chat template) "
                 "to use instead of the byte-level one; --vocab is then its size")
      ->check(CLI::ExistingFile);
  app.add_option("--context", spec.context_length, "context length")->check(CLI::PositiveNumber);
  app.add_option("--seed", spec.seed, "weight seed");
  app.add_option("--head-dim", spec.head_dim,
                 "each head's size when not hidden / heads (Qwen3, Mistral Nemo); 0 for that")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--arch", spec.architecture,
                 "GGUF architecture (qwen2 adds q/k/v biases, qwen3 per-head q/k norms, phi3 "
                 "fuses qkv and gate/up, gemma3 adds q/k and block-output norms)")
      ->check(CLI::IsMember({"llama", "qwen2", "qwen3", "phi3", "gemma3"}));
  app.add_flag("--tied-embeddings", spec.tied_embeddings,
               "write no output.weight: the logits reuse token_embd");
  app.add_option("--rope-theta", spec.rope_theta, "RoPE frequency base")
      ->check(CLI::PositiveNumber);
  app.add_option("--rope-scaling", spec.rope_scaling,
                 "none, linear (positions / factor) or llama3 (Llama-3.1's per-frequency rule)")
      ->check(CLI::IsMember({"none", "linear", "llama3"}));
  app.add_option("--rope-scaling-factor", spec.rope_scaling_factor, "linear and llama3: factor")
      ->check(CLI::PositiveNumber);
  app.add_option("--rope-low-freq-factor", spec.rope_low_freq_factor, "llama3: low_freq_factor")
      ->check(CLI::PositiveNumber);
  app.add_option("--rope-high-freq-factor", spec.rope_high_freq_factor, "llama3: high_freq_factor")
      ->check(CLI::PositiveNumber);
  app.add_option("--rope-original-context", spec.rope_original_context,
                 "llama3: original_max_position_embeddings")
      ->check(CLI::PositiveNumber);
  app.add_option("--sliding-window", spec.sliding_window,
                 "attention.sliding_window to declare (Mistral); 0 for none")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dtype", dtype,
                 "matrix type; q4_k_m, q5_k_m: q4_k, q5_k with q6_k for the output and half the "
                 "attn_v and ffn_down, as llama.cpp's Q4_K_M and Q5_K_M")
      ->check(CLI::IsMember(
          {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m"}));
  CLI11_PARSE(app, argc, argv);

  const std::map<std::string, tpserve::GgmlType> types = {
      {"f32", tpserve::GgmlType::kF32},     {"f16", tpserve::GgmlType::kF16},
      {"bf16", tpserve::GgmlType::kBF16},   {"q8_0", tpserve::GgmlType::kQ8_0},
      {"q4_0", tpserve::GgmlType::kQ4_0},   {"q4_k", tpserve::GgmlType::kQ4_K},
      {"q5_k", tpserve::GgmlType::kQ5_K},   {"q6_k", tpserve::GgmlType::kQ6_K},
      {"q4_k_m", tpserve::GgmlType::kQ4_K}, {"q5_k_m", tpserve::GgmlType::kQ5_K}};
  spec.dtype = types.at(dtype);
  spec.k_quant_mix = dtype == "q4_k_m" || dtype == "q5_k_m";
  const absl::Status status = tpserve::WriteSyntheticModel(spec, output);
  if (!status.ok()) {
    std::fprintf(stderr, "tpserve-mkmodel: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "tpserve-mkmodel: wrote %s\n", output.c_str());
  return 0;
}
