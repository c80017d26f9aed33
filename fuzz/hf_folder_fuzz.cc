// Fuzzes what tpserve reads of a Hugging Face folder before its weights: the first byte picks the
// reader. Even: the rest is a safetensors file image (ParseSafetensors); an accepted header's
// tensors must lie inside the data and hold exactly their shape's bytes. Odd: the rest is a
// tokenizer.json text, with the vocabulary's rows taken from the second and third bytes; what
// AddHfTokenizerKeys accepts must make a GGUF image that parses, and when Tokenizer::FromGguf
// accepts that too, encoding gives ids inside the vocabulary. A file must be accepted or refused
// with a status: never a crash, a hang or an exception.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/json_depth.h"
#include "fuzz/require.h"
#include "model/gguf_file.h"
#include "model/gguf_writer.h"
#include "model/hf_tokenizer.h"
#include "model/safetensors_file.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

void Safetensors(absl::Span<const uint8_t> image) {
  const absl::StatusOr<SafetensorsHeader> header = ParseSafetensors(image, "fuzz.safetensors");
  if (!header.ok()) return;
  Require(header->data.data() + header->data.size() == image.data() + image.size(),
          "the data section ends the file");
  for (const SafetensorsTensor& t : header->tensors) {
    Require(t.begin <= t.end && t.end <= header->data.size(), "tensor bytes inside the data");
  }
}

void TokenizerJson(absl::Span<const uint8_t> input) {
  if (input.size() < 2) return;
  const int64_t vocab_rows = 1 + (input[0] | input[1] << 8) % 4096;
  const std::string text(reinterpret_cast<const char*>(input.data() + 2), input.size() - 2);
  // As the folder reader takes it: nesting past its limit is refused before parsing (copies and
  // prints of a value recurse).
  if (JsonNestingDepth(text) > 64) return;
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return;
  GgufWriter keys;
  if (!AddHfTokenizerKeys(json, nullptr, nullptr, vocab_rows, &keys).ok()) return;
  const std::vector<uint8_t> image = keys.Serialize();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(image, "fuzz.gguf");
  Require(file.ok(), "the keys make a GGUF image that parses");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) return;
  Require((*tokenizer)->vocab_size() == vocab_rows, "the vocabulary has the embedding's rows");
  for (const bool special : {false, true}) {
    const absl::StatusOr<std::vector<int32_t>> ids =
        (*tokenizer)->Encode("Hello, world! 123 \xE2\x96\x81x <s>", special);
    if (!ids.ok()) continue;
    for (const int32_t id : *ids) Require(id >= 0 && id < vocab_rows, "ids in the vocabulary");
  }
}

}  // namespace
}  // namespace tpserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::Span<const uint8_t> rest(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    tpserve::Safetensors(rest);
  } else {
    tpserve::TokenizerJson(rest);
  }
  return 0;
}
