// RopeInverseFrequencies: the unscaled table, linear scaling, llama3's rope_freqs.weight, and
// refusals of a malformed factor tensor.
#include "model/rope_frequencies.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf_writer.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

constexpr double kTheta = 10000.0;

ModelConfig Config(RopeScaling scaling, float factor = 1.0f) {
  ModelConfig c;
  c.rope_theta = static_cast<float>(kTheta);
  c.rope_dims = 8;
  c.rope_scaling = scaling;
  c.rope_scaling_factor = factor;
  return c;
}

// A file holding only rope_freqs.weight with `values` (F32) and ggml dims `dims`.
struct FactorFile {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};

FactorFile WithFactors(const std::vector<float>& values, std::vector<int64_t> dims) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  std::vector<uint8_t> data(values.size() * sizeof(float));
  std::memcpy(data.data(), values.data(), data.size());
  EXPECT_TRUE(w.AddTensor("rope_freqs.weight", GgmlType::kF32, std::move(dims), data).ok());
  FactorFile f;
  f.bytes = w.Serialize();
  auto file = GgufFile::Parse(f.bytes, "factors.gguf");
  EXPECT_TRUE(file.ok()) << file.status();
  if (file.ok()) f.file = std::move(*file);
  return f;
}

TEST(RopeFrequencies, UnscaledLinearAndLlama3) {
  const FactorFile f = WithFactors({1.0f, 1.5f, 8.0f, 8.0f}, {4});
  const auto none = RopeInverseFrequencies(*f.file, Config(RopeScaling::kNone));
  const auto linear = RopeInverseFrequencies(*f.file, Config(RopeScaling::kLinear, 4.0f));
  const auto llama3 = RopeInverseFrequencies(*f.file, Config(RopeScaling::kLlama3));
  ASSERT_TRUE(none.ok() && linear.ok() && llama3.ok());
  const std::vector<double> factors = {1.0, 1.5, 8.0, 8.0};
  for (int i = 0; i < 4; ++i) {
    const double base = std::pow(kTheta, -2.0 * i / 8);
    EXPECT_DOUBLE_EQ((*none)[i], base) << i;
    EXPECT_DOUBLE_EQ((*linear)[i], base / 4) << i;
    EXPECT_DOUBLE_EQ((*llama3)[i], base / factors[i]) << i;
  }
}

TEST(RopeFrequencies, MalformedFactorsAreRefused) {
  const ModelConfig c = Config(RopeScaling::kLlama3);
  EXPECT_THAT(RopeInverseFrequencies(*WithFactors({1, 1, 1}, {3}).file, c).status().message(),
              HasSubstr("rope_freqs.weight has dims [3], expected [4] (rope.dimension_count / 2)"));
  EXPECT_THAT(RopeInverseFrequencies(*WithFactors({1, 0, 1, 1}, {4}).file, c).status().message(),
              HasSubstr("rope_freqs.weight[1] = 0 is not a finite positive factor"));
  EXPECT_THAT(RopeInverseFrequencies(*WithFactors({1, 1, NAN, 1}, {4}).file, c).status().message(),
              HasSubstr("rope_freqs.weight[2] = nan is not a finite positive factor"));
}

}  // namespace
}  // namespace tpserve
