// A model's recommended sampling: general.sampling.* keys into SamplingParams, and
// generation_config.json's fields into those keys.
#include "model/sampling_defaults.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf_file.h"
#include "model/gguf_writer.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::json;

// The file `writer` describes, parsed; the image is kept in `bytes`.
std::unique_ptr<GgufFile> Parse(const GgufWriter& writer, std::vector<uint8_t>* bytes) {
  *bytes = writer.Serialize();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(*bytes, "test.gguf");
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *std::move(file) : nullptr;
}

TEST(SamplingDefaults, AFileWithoutKeysKeepsTheBase) {
  GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  std::vector<uint8_t> bytes;
  const auto file = Parse(writer, &bytes);
  SamplingParams base;
  base.temperature = 0.25f;
  std::string taken = "unset";
  const absl::StatusOr<SamplingParams> got = ModelSamplingDefaults(*file, base, &taken);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->temperature, 0.25f);
  EXPECT_EQ(got->top_k, 0);
  EXPECT_EQ(got->top_p, 1.0f);
  EXPECT_EQ(taken, "");
}

TEST(SamplingDefaults, EveryKeyFillsItsField) {
  GgufWriter writer;
  writer.SetFloat32("general.sampling.temp", 0.6f);
  writer.SetInt32("general.sampling.top_k", 40);
  writer.SetFloat32("general.sampling.top_p", 0.9f);
  writer.SetFloat32("general.sampling.min_p", 0.05f);
  writer.SetFloat32("general.sampling.penalty_repeat", 1.1f);
  writer.SetFloat32("general.sampling.penalty_present", 0.5f);
  writer.SetFloat32("general.sampling.penalty_freq", -0.5f);
  std::vector<uint8_t> bytes;
  const auto file = Parse(writer, &bytes);
  std::string taken;
  const absl::StatusOr<SamplingParams> got = ModelSamplingDefaults(*file, SamplingParams{}, &taken);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->temperature, 0.6f);
  EXPECT_EQ(got->top_k, 40);
  EXPECT_EQ(got->top_p, 0.9f);
  EXPECT_EQ(got->min_p, 0.05f);
  EXPECT_EQ(got->repetition_penalty, 1.1f);
  EXPECT_EQ(got->presence_penalty, 0.5f);
  EXPECT_EQ(got->frequency_penalty, -0.5f);
  EXPECT_EQ(taken,
            "temperature 0.6, top_k 40, top_p 0.9, min_p 0.05, repetition_penalty 1.1, "
            "presence_penalty 0.5, frequency_penalty -0.5");
}

TEST(SamplingDefaults, NonPositiveTopKKeepsEveryToken) {
  for (const int32_t k : {0, -1}) {
    GgufWriter writer;
    writer.SetInt32("general.sampling.top_k", k);
    std::vector<uint8_t> bytes;
    const auto file = Parse(writer, &bytes);
    SamplingParams base;
    base.top_k = 7;
    const absl::StatusOr<SamplingParams> got = ModelSamplingDefaults(*file, base);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->top_k, 0) << k;
  }
}

TEST(SamplingDefaults, BadValuesNameTheKey) {
  struct Case {
    const char* key;
    GgufValue value;
    const char* want;
  };
  const Case cases[] = {
      {"general.sampling.top_p",
       {GgufValueType::kFloat32, 0.0},
       "general.sampling.top_p: top_p = 0 is outside (0, 1]"},
      {"general.sampling.temp",
       {GgufValueType::kFloat32, -1.0},
       "general.sampling.temp: temperature = -1"},
      {"general.sampling.penalty_repeat",
       {GgufValueType::kFloat32, 0.0},
       "general.sampling.penalty_repeat: repetition_penalty = 0 is outside [0.01, 100]"},
      {"general.sampling.min_p",
       {GgufValueType::kString, std::string("0.1")},
       "general.sampling.min_p is not a number"},
  };
  for (const Case& c : cases) {
    GgufWriter writer;
    writer.SetValue(c.key, c.value);
    std::vector<uint8_t> bytes;
    const auto file = Parse(writer, &bytes);
    const absl::StatusOr<SamplingParams> got = ModelSamplingDefaults(*file, SamplingParams{});
    ASSERT_FALSE(got.ok()) << c.key;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(c.want), std::string::npos) << got.status();
  }
}

TEST(SamplingDefaults, GenerationConfigBecomesTheKeys) {
  // Qwen2.5-7B-Instruct's generation_config.json.
  const json generation = json::parse(R"({
    "bos_token_id": 151643, "pad_token_id": 151643, "do_sample": true,
    "eos_token_id": [151645, 151643], "repetition_penalty": 1.05, "temperature": 0.7,
    "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0"})");
  GgufWriter writer;
  ASSERT_TRUE(AddHfSamplingKeys(generation, &writer).ok());
  std::vector<uint8_t> bytes;
  const auto file = Parse(writer, &bytes);
  const absl::StatusOr<SamplingParams> got = ModelSamplingDefaults(*file, SamplingParams{});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->temperature, 0.7f);
  EXPECT_EQ(got->top_k, 20);
  EXPECT_EQ(got->top_p, 0.8f);
  EXPECT_EQ(got->repetition_penalty, 1.05f);
  EXPECT_EQ(got->min_p, 0.0f);
  EXPECT_EQ(file->Find("general.sampling.penalty_present"), nullptr);
}

TEST(SamplingDefaults, GenerationConfigWithoutSamplingAddsNothing) {
  for (const json& generation :
       {json(nullptr), json::parse(R"({"bos_token_id": 1, "eos_token_id": 2})"),
        json::parse(R"({"temperature": null})")}) {
    GgufWriter writer;
    ASSERT_TRUE(AddHfSamplingKeys(generation, &writer).ok()) << generation.dump();
    EXPECT_TRUE(writer.metadata().empty()) << generation.dump();
  }
}

TEST(SamplingDefaults, GenerationConfigFieldsMustBeNumbers) {
  for (const auto& [text, want] : std::vector<std::pair<const char*, const char*>>{
           {R"({"temperature": "0.7"})",
            "generation_config.json: temperature is \"0.7\", not a number"},
           {R"({"top_k": 2.5})", "generation_config.json: top_k is 2.5, not an integer"}}) {
    GgufWriter writer;
    const absl::Status status = AddHfSamplingKeys(json::parse(text), &writer);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(status.message(), want);
  }
}

}  // namespace
}  // namespace tpserve
