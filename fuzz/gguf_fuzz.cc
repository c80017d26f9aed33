// Fuzzes the GGUF reader with arbitrary file images, then everything the servers read from an
// accepted file before loading weights: every metadata value through each typed getter, the
// model config, the tokenizer, and the tensors' data (decoded when small). A file must be
// accepted or refused with a status; an accepted one must keep GgufFile's promise that every
// tensor's bytes lie inside the file and are exactly what its type and shape occupy.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "fuzz/require.h"
#include "model/dequantize.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "model/tokenizer.h"

namespace tpserve {
namespace {

// Tensors up to this many elements are decoded: enough for every tensor of a fuzzed image
// without letting a declared-huge one cost the fuzzer its speed.
constexpr int64_t kMaxDecodedElements = int64_t{1} << 16;

void ReadMetadata(const GgufFile& file) {
  for (const std::string& key : file.keys()) {
    Require(file.Find(key) != nullptr, "every listed key can be found");
    // Each getter either converts or refuses; which one succeeds depends on the type.
    (void)file.GetUint(key);
    (void)file.GetFloat(key);
    (void)file.GetBool(key);
    (void)file.GetString(key);
    (void)file.GetStringArray(key);
    (void)file.GetIntArray(key);
    (void)file.GetFloatArray(key);
  }
}

void ReadTensors(const GgufFile& file, absl::Span<const uint8_t> image) {
  std::vector<float> decoded;
  for (const GgufTensorInfo& tensor : file.tensors()) {
    Require(file.FindTensor(tensor.name) == &tensor, "tensor names are unique and indexed");
    const absl::Span<const uint8_t> data = file.TensorData(tensor);
    Require(data.size() == tensor.num_bytes, "tensor data has num_bytes");
    Require(data.data() >= image.data() && data.data() + data.size() <= image.data() + image.size(),
            "tensor data inside the file");
    const absl::StatusOr<uint64_t> bytes = GgmlBytesFor(tensor.type, tensor.num_elements);
    Require(bytes.ok() && *bytes == tensor.num_bytes, "num_bytes matches type and elements");
    if (tensor.num_elements > kMaxDecodedElements) continue;
    decoded.resize(tensor.num_elements);
    Require(Dequantize(tensor.type, data, absl::MakeSpan(decoded)).ok(),
            "an accepted tensor decodes");
  }
}

}  // namespace
}  // namespace tpserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpserve;
  const absl::Span<const uint8_t> image(data, size);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(image, "fuzz.gguf");
  if (!file.ok()) return 0;
  ReadMetadata(**file);
  ReadTensors(**file, image);
  (void)ModelConfig::FromGguf(**file);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**file);
  if (tokenizer.ok()) {
    // A little text through whatever vocabulary the file declared.
    (void)(*tokenizer)->Encode("Hello, world! 123 <|im_start|>", /*parse_special=*/true);
  }
  return 0;
}
