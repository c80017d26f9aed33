// --cpu-weights: the names round-trip, and auto's rule counts parameters as the model files and the
// published model cards do.
#include "worker/cpu_weights.h"

#include <gtest/gtest.h>

#include "model/gguf_file.h"

namespace tpserve {
namespace {

TEST(CpuWeights, NamesRoundTrip) {
  for (const std::string& name : CpuWeightsNames()) {
    const std::optional<CpuWeights> weights = ParseCpuWeights(name);
    ASSERT_TRUE(weights.has_value()) << name;
    EXPECT_EQ(CpuWeightsName(*weights), name);
  }
  EXPECT_FALSE(ParseCpuWeights("packed16").has_value());
}

// The bundled SmolLM2-135M: every matrix of the file (the norms are vectors) adds up to the count,
// and auto picks 16-bit activations for it.
TEST(CpuWeights, CountsTheBundledModelsMatricesAndAutoPicks16Bits) {
  auto file = GgufFile::Open(TPSERVE_MODEL_PATH);
  ASSERT_TRUE(file.ok()) << file.status();
  auto config = ModelConfig::FromGguf(**file);
  ASSERT_TRUE(config.ok()) << config.status();
  int64_t elements = 0;
  for (const GgufTensorInfo& tensor : (*file)->tensors()) {
    if (tensor.dims.size() == 2) elements += tensor.dims[0] * tensor.dims[1];
  }
  EXPECT_EQ(ParameterCount(*config), elements);
  // Hugging Face's card: 134,515,008 with the 61 norms of 576.
  EXPECT_EQ(ParameterCount(*config) + 61 * 576, 134'515'008);
  EXPECT_EQ(ResolveCpuWeights(CpuWeights::kAuto, *config), CpuWeights::kPacked16);
  EXPECT_EQ(ResolveCpuWeights(CpuWeights::kPacked, *config), CpuWeights::kPacked);
  EXPECT_EQ(ResolveCpuWeights(CpuWeights::kFp32, *config), CpuWeights::kFp32);
}

// Llama-3.2-1B's shape: 1,235,814,400 parameters on its card, of which 33 norms of 2048. Auto keeps
// llama.cpp's 8 bits there.
TEST(CpuWeights, Llama32OneBillionKeepsEightBits) {
  ModelConfig config;
  config.vocab_size = 128256;
  config.hidden_size = 2048;
  config.intermediate_size = 8192;
  config.num_layers = 16;
  config.num_heads = 32;
  config.num_kv_heads = 8;
  config.head_dim = 64;
  config.tie_word_embeddings = true;
  EXPECT_EQ(ParameterCount(config) + 33 * 2048, 1'235'814'400);
  EXPECT_EQ(ResolveCpuWeights(CpuWeights::kAuto, config), CpuWeights::kPacked);
}

}  // namespace
}  // namespace tpserve
