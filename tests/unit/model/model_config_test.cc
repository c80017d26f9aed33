// ModelConfig::FromGguf on the bundled model and on built files with missing or inconsistent keys.
#include "model/model_config.h"

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
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
            "rope_theta=100000 rope_dims=64 rope_pairs=adjacent rope_scaling=none "
            "rms_norm_eps=1e-05 context=8192 sliding_window=0 qkv_bias=false qk_norm=false "
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
      {[](GgufWriter* w) { w->SetString("general.architecture", "gemma"); },
       "general.architecture: 'gemma' is not supported; 'llama', 'qwen2', 'qwen3', 'phi3' and "
       "'gemma3' are"},
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
      {[](GgufWriter* w) { w->SetUint32("llama.attention.value_length", 32); },
       "llama.attention.value_length: 32 differs from the key length 16"},
      {[](GgufWriter* w) { w->SetUint32("llama.attention.key_length", 0); },
       "llama.attention.key_length: value 0 is not in [1, "},
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

// The keys of SmallLlama under another architecture's prefix.
GgufWriter SmallModel(const std::string& arch) {
  GgufWriter llama = SmallLlama();
  Parsed source = Build(llama);
  GgufWriter w;
  for (const std::string& k : source.file->keys()) {
    const std::string key = k.rfind("llama.", 0) == 0 ? arch + k.substr(5) : k;
    w.SetValue(key, *source.file->Find(k));
  }
  w.SetString("general.architecture", arch);
  return w;
}

absl::StatusOr<ModelConfig> ConfigOf(const GgufWriter& w) {
  Parsed p = Build(w);
  return ModelConfig::FromGguf(*p.file);
}

void AddVector(GgufWriter* w, const std::string& name, int64_t size) {
  const std::vector<uint8_t> zeros(size * 4);
  EXPECT_TRUE(w->AddTensor(name, GgmlType::kF32, {size}, zeros).ok()) << name;
}

TEST(ModelConfig, Qwen2KeysAndRotateHalfPairs) {
  GgufWriter w = SmallModel("qwen2");
  w.SetUint32("qwen2.attention.head_count_kv", 4);
  w.SetFloat32("qwen2.rope.freq_base", 1000000.0f);
  absl::StatusOr<ModelConfig> c = ConfigOf(w);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "qwen2");
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->rope_theta, 1000000.0f);
  EXPECT_EQ(c->context_length, 256);
  EXPECT_TRUE(c->rope_rotate_half);
  EXPECT_FALSE(c->qkv_bias);
  absl::StatusOr<ModelConfig> llama = ConfigOf(SmallLlama());
  ASSERT_TRUE(llama.ok());
  EXPECT_FALSE(llama->rope_rotate_half);
}

// Qwen3 (and Mistral Nemo): heads * head_dim differs from hidden; the head size is the key length.
TEST(ModelConfig, Qwen3HeadSizeFromTheKeyLengthAndQkNorm) {
  GgufWriter w = SmallModel("qwen3");
  w.SetUint32("qwen3.attention.head_count", 5);  // 5 * 32 = 160 over a hidden size of 64
  w.SetUint32("qwen3.attention.head_count_kv", 1);
  w.SetUint32("qwen3.attention.key_length", 32);
  w.SetUint32("qwen3.attention.value_length", 32);
  w.SetUint32("qwen3.rope.dimension_count", 32);
  absl::StatusOr<ModelConfig> c = ConfigOf(w);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "qwen3");
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->num_heads, 5);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_TRUE(c->rope_rotate_half);
  EXPECT_FALSE(c->qkv_bias);
  absl::StatusOr<ModelConfig> llama = ConfigOf(SmallLlama());
  ASSERT_TRUE(llama.ok());
  EXPECT_FALSE(llama->qk_norm);
  EXPECT_EQ(llama->head_dim, 16);
}

// Gemma 3: what llama.cpp fixes for the architecture, and what a Hugging Face folder overrides.
TEST(ModelConfig, Gemma3LayersScalesAndNorms) {
  GgufWriter w = SmallModel("gemma3");
  absl::StatusOr<ModelConfig> c = ConfigOf(w);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ffn_activation, FfnActivation::kGeluTanh);
  EXPECT_FLOAT_EQ(c->embedding_scale, 8.0f);  // sqrt(64)
  EXPECT_TRUE(c->block_output_norms);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FLOAT_EQ(c->AttentionScale(), 0.25f);  // 1 / sqrt(head_dim 16)
  for (int layer = 0; layer < 12; ++layer) {
    EXPECT_EQ(c->IsLocalLayer(layer), layer != 5 && layer != 11) << layer;
  }
  EXPECT_FLOAT_EQ(c->rope_theta_local, 10000.0f);
  EXPECT_EQ(c->norm_weight_offset, 0.0f);
  w.SetFloat32("tpserve.attention.query_pre_attn_scalar", 64.0f);
  w.SetFloat32("tpserve.norm.weight_offset", 1.0f);
  w.SetFloat32("tpserve.rope.freq_base_local", 5000.0f);
  c = ConfigOf(w);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->AttentionScale(), 0.125f);
  EXPECT_EQ(c->norm_weight_offset, 1.0f);
  EXPECT_FLOAT_EQ(c->rope_theta_local, 5000.0f);
  w.SetFloat32("gemma3.final_logit_softcapping", 30.0f);
  EXPECT_THAT(ConfigError(w), HasSubstr("gemma3.final_logit_softcapping: logit soft-capping"));
  absl::StatusOr<ModelConfig> llama = ConfigOf(SmallLlama());
  ASSERT_TRUE(llama.ok());
  EXPECT_FALSE(llama->IsLocalLayer(0));
  EXPECT_FLOAT_EQ(llama->AttentionScale(), 0.25f);
  EXPECT_EQ(llama->ffn_activation, FfnActivation::kSilu);
}

TEST(ModelConfig, QkvBiasesOnEveryLayerOrNone) {
  GgufWriter w = SmallModel("qwen2");
  for (int layer = 0; layer < 2; ++layer) {
    const std::string b = "blk." + std::to_string(layer) + ".";
    AddVector(&w, b + "attn_q.bias", 64);
    AddVector(&w, b + "attn_k.bias", 32);
    if (layer == 0) AddVector(&w, b + "attn_v.bias", 32);
  }
  EXPECT_THAT(ConfigError(w),
              HasSubstr("blk.1.attn_v.bias: is missing while blk.0.attn_q.bias is present"));
  AddVector(&w, "blk.1.attn_v.bias", 32);
  absl::StatusOr<ModelConfig> c = ConfigOf(w);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);
}

// A fuzzed file declared 2^31 - 1 layers: the bias checks walked every one of them for minutes.
TEST(ModelConfig, AHugeBlockCountCostsNoMoreThanTheTensorsPresent) {
  constexpr uint64_t kLayers = (uint64_t{1} << 31) - 1;
  for (const bool biases : {false, true}) {
    GgufWriter w = SmallModel("qwen2");
    w.SetUint64("qwen2.block_count", kLayers);
    if (biases) {
      AddVector(&w, "blk.0.attn_q.bias", 64);
      AddVector(&w, "blk.0.attn_k.bias", 32);
      AddVector(&w, "blk.0.attn_v.bias", 32);
    }
    const absl::Time start = absl::Now();
    const absl::StatusOr<ModelConfig> c = ConfigOf(w);
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "biases " << biases;
    if (biases) {
      EXPECT_THAT(c.status().message(), HasSubstr("blk.1.attn_q.bias: is missing"));
    } else {
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(c->num_layers, static_cast<int64_t>(kLayers));
    }
  }
}

TEST(ModelConfig, BiasesWithoutAPlaceAreRefused) {
  for (const std::string name : {"blk.1.attn_output.bias", "blk.0.ffn_down.bias", "output.bias"}) {
    GgufWriter w = SmallLlama();
    AddVector(&w, name, 64);
    EXPECT_THAT(ConfigError(w), HasSubstr(name + ": ")) << name;
    EXPECT_THAT(ConfigError(w), HasSubstr("not supported")) << name;
  }
}

TEST(ModelConfig, RopeScaling) {
  {
    absl::StatusOr<ModelConfig> c = ConfigOf(SmallLlama());
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->rope_scaling, RopeScaling::kNone);
  }
  {
    GgufWriter w = SmallModel("qwen2");
    w.SetString("qwen2.rope.scaling.type", "linear");
    w.SetFloat32("qwen2.rope.scaling.factor", 4.0f);
    absl::StatusOr<ModelConfig> c = ConfigOf(w);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->rope_scaling, RopeScaling::kLinear);
    EXPECT_EQ(c->rope_scaling_factor, 4.0f);
    EXPECT_THAT(c->DebugString(), HasSubstr("rope_scaling=linear x4"));
  }
  {  // llama.cpp's reading: no type means linear, and the older key holds the factor.
    GgufWriter w = SmallLlama();
    w.SetFloat32("llama.rope.scale_linear", 2.0f);
    absl::StatusOr<ModelConfig> c = ConfigOf(w);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->rope_scaling, RopeScaling::kLinear);
    EXPECT_EQ(c->rope_scaling_factor, 2.0f);
  }
  {  // A type of none ignores a factor.
    GgufWriter w = SmallLlama();
    w.SetString("llama.rope.scaling.type", "none");
    w.SetFloat32("llama.rope.scaling.factor", 4.0f);
    absl::StatusOr<ModelConfig> c = ConfigOf(w);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->rope_scaling, RopeScaling::kNone);
  }
  {  // Llama-3.1 as llama.cpp converts it: rope_freqs.weight and no scaling keys.
    GgufWriter w = SmallLlama();
    AddVector(&w, "rope_freqs.weight", 8);
    absl::StatusOr<ModelConfig> c = ConfigOf(w);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->rope_scaling, RopeScaling::kLlama3);
  }
}

TEST(ModelConfig, RopeScalingRefusalsNameTheType) {
  struct Case {
    std::function<void(GgufWriter*)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](GgufWriter* w) { w->SetString("llama.rope.scaling.type", "yarn"); },
       "llama.rope.scaling.type: RoPE scaling 'yarn' is not supported (none, linear and llama3 "
       "are)"},
      {[](GgufWriter* w) { w->SetString("llama.rope.scaling.type", "longrope"); },
       "llama.rope.scaling.type: RoPE scaling 'longrope' is not supported"},
      {[](GgufWriter* w) { w->SetString("llama.rope.scaling.type", "llama3"); },
       "llama.rope.scaling.type: llama3 scaling needs its per-frequency factors in the tensor "
       "rope_freqs.weight"},
      {[](GgufWriter* w) { w->SetFloat32("llama.rope.scaling.factor", -2.0f); },
       "llama.rope.scaling.factor: value -2 is not a finite non-negative number"},
      {[](GgufWriter* w) {
         w->SetFloat32("llama.rope.scaling.factor", 8.0f);
         AddVector(w, "rope_freqs.weight", 8);
       },
       "llama.rope.scaling.factor: linear RoPE scaling by 8 together with rope_freqs.weight"},
  };
  for (const Case& c : cases) {
    GgufWriter w = SmallLlama();
    c.edit(&w);
    EXPECT_THAT(ConfigError(w), HasSubstr("model config: " + c.want));
  }
}

// SmallModel is defined below; declared here for the window test.
GgufWriter SmallModel(const std::string& arch);

TEST(ModelConfig, ContextClampedToASmallerSlidingWindow) {
  {
    GgufWriter w = SmallLlama();
    w.SetUint32("llama.attention.sliding_window", 64);
    absl::StatusOr<ModelConfig> c = ConfigOf(w);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->sliding_window, 64);
    EXPECT_EQ(c->context_length, 64);
    EXPECT_EQ(c->AttentionWindow(0), 64);
    // A pass that applies the window itself serves the model's whole context.
    ModelConfig whole = *c;
    whole.ServeWholeContext();
    EXPECT_EQ(whole.context_length, 256);
  }
  {  // Gemma 3: the window on the local layers only.
    GgufWriter w = SmallModel("gemma3");
    w.SetUint32("gemma3.attention.sliding_window", 32);
    absl::StatusOr<ModelConfig> c = ConfigOf(w);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->AttentionWindow(0), 32);
    EXPECT_EQ(c->AttentionWindow(5), 0);
    EXPECT_EQ(c->AttentionWindow(6), 32);
  }
  for (const uint32_t window : {0u, 256u, 4096u}) {  // none, or no smaller than the context
    GgufWriter w = SmallLlama();
    w.SetUint32("llama.attention.sliding_window", window);
    absl::StatusOr<ModelConfig> c = ConfigOf(w);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->context_length, 256) << window;
  }
  GgufWriter w = SmallLlama();
  w.SetString("llama.attention.sliding_window", "4096");
  EXPECT_THAT(ConfigError(w), HasSubstr("llama.attention.sliding_window: gguf: key"));
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
