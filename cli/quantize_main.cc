// tpserve-quantize: rewrites a GGUF model with its matrices in another type (F32, F16, BF16,
// Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K). Every matrix is decoded to fp32 and encoded again, so a
// Q4_1 file written at F32 computes the same function at full precision: with the original it
// forms a target/draft pair for speculative decoding. Vectors (norms, biases, RoPE factors),
// matrices already of the type and matrices whose rows are not whole blocks of it are copied.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "model/dequantize.h"
#include "model/gguf_file.h"
#include "model/gguf_writer.h"
#include "model/quantize.h"

namespace {

using tpserve::GgmlType;

// llama.cpp's general.file_type numbers (llama_ftype) for the all-one-type files written here.
const std::map<std::string, std::pair<GgmlType, uint32_t>>& Types() {
  static const auto* types = new std::map<std::string, std::pair<GgmlType, uint32_t>>{
      {"f32", {GgmlType::kF32, 0}},    {"f16", {GgmlType::kF16, 1}},
      {"q4_0", {GgmlType::kQ4_0, 2}},  {"q4_1", {GgmlType::kQ4_1, 3}},
      {"q8_0", {GgmlType::kQ8_0, 7}},  {"q4_k", {GgmlType::kQ4_K, 14}},
      {"q5_k", {GgmlType::kQ5_K, 16}}, {"q6_k", {GgmlType::kQ6_K, 18}},
      {"bf16", {GgmlType::kBF16, 32}}};
  return *types;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "tpserve-quantize: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, output, type_name;
  CLI::App app{"Rewrite a GGUF model with its matrices in another type"};
  app.add_option("input", input, "GGUF file to read")->required()->check(CLI::ExistingFile);
  app.add_option("output", output, "GGUF file to write")->required();
  std::vector<std::string> names;
  for (const auto& [name, _] : Types()) names.push_back(name);
  app.add_option("--type", type_name, "type of the matrices")
      ->required()
      ->check(CLI::IsMember(names));
  CLI11_PARSE(app, argc, argv);
  const auto [type, file_type] = Types().at(type_name);
  const tpserve::GgmlTypeTraits traits = *tpserve::GetGgmlTypeTraits(static_cast<uint32_t>(type));

  auto file = tpserve::GgufFile::Open(input);
  if (!file.ok()) return Fail(std::string(file.status().message()));
  tpserve::GgufWriter writer;
  if (auto status = writer.CopyKeys(**file); !status.ok()) {
    return Fail(std::string(status.message()));
  }
  writer.SetUint32("general.file_type", file_type);

  const auto& tensors = (*file)->tensors();
  int converted = 0;
  std::vector<float> values;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const tpserve::GgufTensorInfo& tensor = tensors[i];
    const absl::Span<const uint8_t> data = (*file)->TensorData(tensor);
    const bool convert = tensor.dims.size() == 2 && tensor.type != type &&
                         tensor.dims[0] % traits.block_elements == 0;
    absl::Status status;
    if (convert) {
      values.resize(static_cast<size_t>(tensor.num_elements));
      status = tpserve::Dequantize(tensor.type, data, absl::MakeSpan(values));
      if (status.ok()) {
        status =
            writer.AddTensor(tensor.name, type, tensor.dims, tpserve::EncodeBlocks(values, type));
      }
      ++converted;
    } else {
      status = writer.AddTensor(tensor.name, tensor.type, tensor.dims, data);
    }
    if (!status.ok()) return Fail(tensor.name + ": " + std::string(status.message()));
    std::fprintf(stderr, "\rtpserve-quantize: tensor %zu/%zu", i + 1, tensors.size());
  }
  std::fprintf(stderr, "\n");
  if (auto status = writer.WriteFile(output); !status.ok()) {
    return Fail(std::string(status.message()));
  }
  std::fprintf(stderr, "tpserve-quantize: wrote %s (%d of %zu tensors as %s, the rest copied)\n",
               output.c_str(), converted, tensors.size(), std::string(traits.name).c_str());
  return 0;
}
