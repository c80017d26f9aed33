// The C++ side of hf_tokenizer_families (hf_tokenizer_families_test.py): encodes texts with the
// tokenizer tpserve makes of a Hugging Face tokenizer.json, as it does for a folder's.
//
//   hf_tokenizer_encode DIR TEXTS.json   → JSON on stdout: one list of ids per text
//     DIR holds tokenizer.json (and tokenizer_config.json, optional); TEXTS is a list of strings,
//     encoded without BOS and without parsing special tokens, as llama.cpp's suite does.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "model/gguf_file.h"
#include "model/gguf_writer.h"
#include "model/hf_tokenizer.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "hf_tokenizer_encode: %s\n", message.c_str());
  return 1;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// The vocabulary's rows: one past the largest id of the vocabulary and the added tokens.
int64_t VocabRows(const nlohmann::json& tokenizer) {
  int64_t rows = 0;
  for (const auto& [text, id] : tokenizer["model"]["vocab"].items()) {
    rows = std::max(rows, id.get<int64_t>() + 1);
  }
  for (const auto& added : tokenizer["added_tokens"]) {
    rows = std::max(rows, added["id"].get<int64_t>() + 1);
  }
  return rows;
}

int Run(const std::string& dir, const std::string& texts_path) {
  const nlohmann::json tokenizer = ReadJson(dir + "/tokenizer.json");
  if (!tokenizer.is_object()) return Fail("cannot read " + dir + "/tokenizer.json");
  const nlohmann::json texts = ReadJson(texts_path);
  if (!texts.is_array()) return Fail("cannot read " + texts_path);
  GgufWriter keys;
  const absl::Status added = AddHfTokenizerKeys(tokenizer, ReadJson(dir + "/tokenizer_config.json"),
                                                nullptr, VocabRows(tokenizer), &keys);
  if (!added.ok()) return Fail(std::string(added.message()));
  const std::vector<uint8_t> image = keys.Serialize();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(image, dir);
  if (!file.ok()) return Fail(std::string(file.status().message()));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer_or = Tokenizer::FromGguf(**file);
  if (!tokenizer_or.ok()) return Fail(std::string(tokenizer_or.status().message()));
  nlohmann::json out = nlohmann::json::array();
  for (const auto& text : texts) {
    absl::StatusOr<std::vector<int32_t>> ids =
        (*tokenizer_or)->Encode(text.get<std::string>(), /*parse_special=*/false);
    if (!ids.ok()) return Fail(std::string(ids.status().message()));
    out.push_back(*ids);
  }
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  if (argc != 3) return tpserve::Fail("usage: hf_tokenizer_encode DIR TEXTS.json");
  return tpserve::Run(argv[1], argv[2]);
}
