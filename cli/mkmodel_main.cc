// tpserve-mkmodel: writes a random-weight Llama GGUF of a chosen shape.
#include <cstdio>
#include <map>
#include <string>

#include "CLI/CLI.hpp"
#include "model/synthetic_model.h"

int main(int argc, char** argv) {
  tpserve::SyntheticModelSpec spec;
  std::string output;
  std::string dtype = "f32";
  CLI::App app{"Write a random-weight Llama model as GGUF"};
  app.add_option("--output", output, "GGUF file to write")->required();
  app.add_option("--layers", spec.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--hidden", spec.hidden, "embedding width")->check(CLI::PositiveNumber);
  app.add_option("--heads", spec.heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--kv-heads", spec.kv_heads, "key/value heads")->check(CLI::PositiveNumber);
  app.add_option("--ffn", spec.ffn, "MLP intermediate width")->check(CLI::PositiveNumber);
  app.add_option("--vocab", spec.vocab, "vocabulary size (>= 259)")->check(CLI::PositiveNumber);
  app.add_option("--context", spec.context_length, "context length")->check(CLI::PositiveNumber);
  app.add_option("--seed", spec.seed, "weight seed");
  app.add_option("--dtype", dtype, "matrix type")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
  CLI11_PARSE(app, argc, argv);

  const std::map<std::string, tpserve::GgmlType> types = {{"f32", tpserve::GgmlType::kF32},
                                                          {"f16", tpserve::GgmlType::kF16},
                                                          {"bf16", tpserve::GgmlType::kBF16},
                                                          {"q8_0", tpserve::GgmlType::kQ8_0}};
  spec.dtype = types.at(dtype);
  const absl::Status status = tpserve::WriteSyntheticModel(spec, output);
  if (!status.ok()) {
    std::fprintf(stderr, "tpserve-mkmodel: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "tpserve-mkmodel: wrote %s\n", output.c_str());
  return 0;
}
