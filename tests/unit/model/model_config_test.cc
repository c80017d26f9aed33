// ModelConfig::FromGguf on the bundled model and on built files with missing or inconsistent keys.
#include "model/model_config.h"

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf_file.h"
#include "model/gguf_writer.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

// Parses the image a writer produces; the bytes live as long as the returned holder.
struct Parsed {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};

Parsed Build(const GgufWriter& w) {
  Parsed p;
  p.bytes = w.Serialize();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(p.bytes, "built.gguf");
  EXPECT_TRUE(file.ok()) << file.status();
  if (file.ok()) p.file = std::move(*file);
  return p;
}

// A complete small llama config: hidden 64, 4 heads of 16, 2 kv heads.
GgufWriter SmallLlama() {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint32("llama.block_count", 2);
  w.SetUint32("llama.context_length", 256);
  w.SetUint32("llama.embedding_length", 64);
  w.SetUint32("llama.feed_forward_length", 128);
  w.SetUint32("llama.attention.head_count", 4);
  w.SetUint32("llama.attention.head_count_kv", 2);
  w.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  w.SetStringArray("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e"});
  return w;
}

// The config of `w`, or the error message.
std::string ConfigError(const GgufWriter& w) {
  Parsed p = Build(w);
  absl::StatusOr<ModelConfig> config = ModelConfig::FromGguf(*p.file);
  EXPECT_FALSE(config.ok()) << config->DebugString();
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  return std::string(config.status().message());
}

TEST(ModelConfig, BundledSmolLm2) {
  const std::string path = TPSERVE_MODEL_PATH;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model file not present: " << path;
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<ModelConfig> c = ModelConfig::FromGguf(**file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->num_layers, 30);
  EXPECT_EQ(c->hidden_size, 576);
  EXPECT_EQ(c->intermediate_size, 1536);
  EXPECT_EQ(c->num_heads, 9);
  EXPECT_EQ(c->num_kv_heads, 3);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->rope_dims, 64);
  EXPECT_EQ(c->rope_theta, 100000.0f);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_EQ(c->context_length, 8192);
  EXPECT_EQ(c->vocab_size, 49152);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->DebugString(),
            "llama layers=30 hidden=576 ffn=1536 heads=9 kv_heads=3 head_dim=64 vocab=49152 "
            "rope_theta=100000 rope_dims=64 rms_norm_eps=1e-05 context=8192 "
            "tied_embeddings=true");
}

TEST(ModelConfig, DefaultsForOptionalKeys) {
  GgufWriter w = SmallLlama();
  Parsed p = Build(w);
  absl::StatusOr<ModelConfig> c = ModelConfig::FromGguf(*p.file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rope_dims, 16);         // rope.dimension_count defaults to head_dim
  EXPECT_EQ(c->rope_theta, 10000.0f);  // rope.freq_base defaults to 10000
  EXPECT_EQ(c->vocab_size, 5);         // length of tokenizer.ggml.tokens
  EXPECT_EQ(c->rms_norm_eps, 1e-6f);
  EXPECT_TRUE(c->tie_word_embeddings);
}

TEST(ModelConfig, KvHeadsDefaultToHeadsAndVocabToEmbeddingRows) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint32("llama.block_count", 1);
  w.SetUint32("llama.context_length", 64);
  w.SetUint32("llama.embedding_length", 32);
  w.SetUint32("llama.feed_forward_length", 64);
  w.SetUint32("llama.attention.head_count", 2);
  w.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.SetUint32("llama.rope.dimension_count", 8);
  w.SetFloat32("llama.rope.freq_base", 500000.0f);
  const std::vector<uint8_t> embd(32 * 7 * 4), out(32 * 7 * 4);
  ASSERT_TRUE(w.AddTensor("token_embd.weight", GgmlType::kF32, {32, 7}, embd).ok());
  ASSERT_TRUE(w.AddTensor("output.weight", GgmlType::kF32, {32, 7}, out).ok());
  Parsed p = Build(w);
  absl::StatusOr<ModelConfig> c = ModelConfig::FromGguf(*p.file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->vocab_size, 7);
  EXPECT_EQ(c->rope_dims, 8);
  EXPECT_EQ(c->rope_theta, 500000.0f);
  EXPECT_FALSE(c->tie_word_embeddings);
}

TEST(ModelConfig, MissingRequiredKeyIsNamed) {
  for (const std::string key :
       {"general.architecture", "llama.block_count", "llama.context_length",
        "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
        "llama.attention.layer_norm_rms_epsilon"}) {
    // Rebuild without `key`: the writer has no delete, so copy every other key.
    GgufWriter full = SmallLlama();
    Parsed source = Build(full);
    GgufWriter w;
    for (const std::string& k : source.file->keys()) {
      if (k != key) w.SetValue(k, *source.file->Find(k));
    }
    EXPECT_THAT(ConfigError(w), HasSubstr(key + ": required key is missing")) << key;
  }
}

TEST(ModelConfig, InvalidValuesAreNamed) {
  struct Case {
    std::function<void(GgufWriter*)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](GgufWriter* w) { w->SetString("general.architecture", "qwen2"); },
       "general.architecture: 'qwen2' is not supported"},
      {[](GgufWriter* w) { w->SetUint32("general.architecture", 1); },
       "general.architecture: gguf: key 'general.architecture' has type uint32, want string"},
      {[](GgufWriter* w) { w->SetUint32("llama.block_count", 0); },
       "llama.block_count: value 0 is not in [1, "},
      {[](GgufWriter* w) { w->SetString("llama.embedding_length", "64"); },
       "llama.embedding_length: gguf: key 'llama.embedding_length' has type string"},
      {[](GgufWriter* w) { w->SetUint32("llama.attention.head_count", 5); },
       "llama.attention.head_count: 5 does not divide embedding_length 64"},
      {[](GgufWriter* w) { w->SetUint32("llama.attention.head_count_kv", 3); },
       "llama.attention.head_count_kv: 3 does not divide head_count 4"},
      {[](GgufWriter* w) { w->SetFloat32("llama.attention.layer_norm_rms_epsilon", -1.0f); },
       "llama.attention.layer_norm_rms_epsilon: value -1 is not a finite positive number"},
      {[](GgufWriter* w) { w->SetFloat32("llama.rope.freq_base", 0.0f); },
       "llama.rope.freq_base: value 0 is not a finite positive number"},
      {[](GgufWriter* w) { w->SetUint32("llama.rope.dimension_count", 18); },
       "llama.rope.dimension_count: 18 is odd or exceeds head_dim 16"},
      {[](GgufWriter* w) { w->SetUint32("llama.attention.key_length", 32); },
       "llama.attention.key_length: 32 differs from"},
      {[](GgufWriter* w) { w->SetUint64("llama.vocab_size", uint64_t{1} << 40); },
       "llama.vocab_size: value 1099511627776 is not in"},
      {[](GgufWriter* w) {
         const std::vector<uint8_t> embd(64 * 4 * 4);
         EXPECT_TRUE(w->AddTensor("token_embd.weight", GgmlType::kF32, {64, 4}, embd).ok());
       },
       "token_embd.weight: dims [64, 4] are not [hidden_size 64, vocab_size 5]"},
  };
  for (const Case& c : cases) {
    GgufWriter w = SmallLlama();
    c.edit(&w);
    EXPECT_THAT(ConfigError(w), HasSubstr("model config: " + c.want));
  }
}

TEST(ModelConfig, VocabSizeNeedsASource) {
  GgufWriter full = SmallLlama();
  Parsed source = Build(full);
  GgufWriter w;
  for (const std::string& k : source.file->keys()) {
    if (k != "tokenizer.ggml.tokens") w.SetValue(k, *source.file->Find(k));
  }
  EXPECT_THAT(ConfigError(w), HasSubstr("llama.vocab_size: missing, and neither"));
}

}  // namespace
}  // namespace tpserve
