// LoadShardWeights's KV-cache scales (KCacheScaleName, VCacheScaleName): each rank gets the scales
// of its own KV heads, from a tensor with one per KV head or one for the layer, F32 or BF16; a
// layer without one gets 1. Tensor parallel 1, 2 and 4 split the 4 KV heads; 8 replicates them
// (each rank holds the KV head of its query heads). A tensor of another size, or a scale that is
// not finite and at least FLT_MIN, is refused naming the tensor.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf_file.h"
#include "model/hf_fp8.h"
#include "model/model_config.h"
#include "model/shard_layout.h"
#include "model/synthetic_model.h"
#include "worker/shard_loader.h"

namespace tpserve {
namespace {

struct ScaleTensor {
  std::string name;
  GgmlType type;  // kF32 or kBF16
  std::vector<float> values;
};

// bf16's bits of `v`, which the test's values hold exactly.
uint16_t Bf16Bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  EXPECT_EQ(bits & 0xFFFF, 0u) << v << " is not a bf16 value";
  return static_cast<uint16_t>(bits >> 16);
}

// `file`'s tensors and keys, plus `extra`.
std::unique_ptr<GgufFile> WithScales(const GgufFile& file, const std::vector<ScaleTensor>& extra) {
  GgufParts parts;
  parts.display_name = "kv scales view";
  parts.identity = "kv scales view";
  for (const std::string& key : file.keys()) parts.metadata.emplace_back(key, *file.Find(key));
  for (const GgufTensorInfo& t : file.tensors()) {
    GgufTensorInfo info = t;
    info.offset = 0;
    info.section = static_cast<uint32_t>(parts.owned.size());
    const absl::Span<const uint8_t> bytes = file.TensorData(t);
    parts.owned.emplace_back(bytes.begin(), bytes.end());
    parts.tensors.push_back(std::move(info));
  }
  for (const ScaleTensor& s : extra) {
    std::vector<uint8_t> bytes;
    for (const float v : s.values) {
      if (s.type == GgmlType::kF32) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        bytes.insert(bytes.end(), p, p + sizeof(float));
      } else {
        const uint16_t bits = Bf16Bits(v);
        const auto* p = reinterpret_cast<const uint8_t*>(&bits);
        bytes.insert(bytes.end(), p, p + sizeof(bits));
      }
    }
    GgufTensorInfo info;
    info.name = s.name;
    info.dims = {static_cast<int64_t>(s.values.size())};
    info.type = s.type;
    info.offset = 0;
    info.num_bytes = bytes.size();
    info.section = static_cast<uint32_t>(parts.owned.size());
    parts.owned.push_back(std::move(bytes));
    parts.tensors.push_back(std::move(info));
  }
  auto view = GgufFile::Assemble(std::move(parts));
  EXPECT_TRUE(view.ok()) << view.status();
  return view.ok() ? *std::move(view) : nullptr;
}

class ShardLoaderKvScalesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SyntheticModelSpec spec;
    spec.layers = 2;
    spec.hidden = 64;
    spec.heads = 8;
    spec.kv_heads = 4;
    spec.ffn = 96;
    spec.vocab = 300;
    path_ = (std::filesystem::temp_directory_path() /
             ("tpserve-kv-scales-" + std::to_string(::getpid()) + ".gguf"))
                .string();
    ASSERT_TRUE(WriteSyntheticModel(spec, path_).ok());
    auto file = GgufFile::Open(path_);
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = *std::move(file);
    auto config = ModelConfig::FromGguf(*file_);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
  }
  void TearDown() override { std::filesystem::remove(path_); }

  absl::StatusOr<ModelWeights> Load(const GgufFile& view, int rank, int world) {
    absl::StatusOr<ShardLayout> layout = ShardLayout::Make(config_, rank, world);
    EXPECT_TRUE(layout.ok()) << layout.status();
    return LoadShardWeights(view, config_, *layout, ShardFormats{CpuWeights::kPacked, false});
  }

  std::string path_;
  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
};

TEST_F(ShardLoaderKvScalesTest, EachRankGetsItsKvHeadsScales) {
  const std::vector<float> k0 = {0.5f, 0.25f, 2.0f, 0.125f};  // per head, F32
  const std::vector<float> v0 = {0.375f};                     // the layer, F32
  const std::vector<float> k1 = {0.0625f};                    // the layer, BF16
  auto view = WithScales(*file_, {{KCacheScaleName(0), GgmlType::kF32, k0},
                                  {VCacheScaleName(0), GgmlType::kF32, v0},
                                  {KCacheScaleName(1), GgmlType::kBF16, k1}});
  ASSERT_NE(view, nullptr);
  for (const int world : {1, 2, 4, 8}) {
    for (int rank = 0; rank < world; ++rank) {
      SCOPED_TRACE(::testing::Message() << "rank " << rank << "/" << world);
      absl::StatusOr<ShardLayout> layout = ShardLayout::Make(config_, rank, world);
      ASSERT_TRUE(layout.ok()) << layout.status();
      absl::StatusOr<ModelWeights> w = Load(*view, rank, world);
      ASSERT_TRUE(w.ok()) << w.status();
      const int64_t heads = world <= 4 ? 4 / world : 1;
      // The KV heads a rank holds: its quarter, half or whole; at tp 8 (2 query heads per KV
      // head) rank r holds KV head r / 2.
      const int64_t first = world <= 4 ? rank * heads : rank / 2;
      ASSERT_EQ(layout->kv_heads.begin, first);
      ASSERT_EQ(layout->kv_heads.size, heads);
      std::vector<float> want_k0(k0.begin() + first, k0.begin() + first + heads);
      EXPECT_EQ(w->layers[0].k_cache_scales, want_k0);
      EXPECT_EQ(w->layers[0].v_cache_scales, std::vector<float>(heads, 0.375f));
      EXPECT_EQ(w->layers[1].k_cache_scales, std::vector<float>(heads, 0.0625f));
      EXPECT_EQ(w->layers[1].v_cache_scales, std::vector<float>(heads, 1.0f));
    }
  }
}

TEST_F(ShardLoaderKvScalesTest, AModelWithoutScalesGetsOnes) {
  absl::StatusOr<ModelWeights> w = Load(*file_, 1, 2);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const LayerWeights& layer : w->layers) {
    EXPECT_EQ(layer.k_cache_scales, std::vector<float>(2, 1.0f));
    EXPECT_EQ(layer.v_cache_scales, std::vector<float>(2, 1.0f));
  }
}

TEST_F(ShardLoaderKvScalesTest, BadScalesAreRefusedNamingTheTensor) {
  const struct {
    std::vector<float> values;
    std::string says;
  } cases[] = {
      {{0.5f, 0.5f, 0.5f}, "holds 3 scales: one for the layer or one per KV head (4)"},
      {{0.5f, 0.0f, 0.5f, 0.5f}, "holds the scale 0"},
      {{-0.5f}, "holds the scale -0.5"},
      {{std::nanf("")}, "holds the scale nan"},
      {{INFINITY}, "holds the scale inf"},
      // A positive subnormal: 1 / scale is infinite, and 0 * inf would store NaN.
      {{1e-39f}, "holds the scale 1e-39"},
  };
  for (const auto& c : cases) {
    auto view = WithScales(*file_, {{VCacheScaleName(1), GgmlType::kF32, c.values}});
    ASSERT_NE(view, nullptr);
    absl::StatusOr<ModelWeights> w = Load(*view, 0, 1);
    ASSERT_FALSE(w.ok()) << c.says;
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(w.status().message().find("tensor " + VCacheScaleName(1) + " " + c.says),
              std::string::npos)
        << w.status();
  }
}

}  // namespace
}  // namespace tpserve
