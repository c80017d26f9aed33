#include "model/synthetic_model.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/gguf_writer.h"
#include "model/tokenizer.h"

namespace tpserve {
namespace {

constexpr int64_t kSpecialTokens = 3;  // <|endoftext|>, <|im_start|>, <|im_end|>
constexpr char kChatMlTemplate[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

uint16_t ToBits(_Float16 h) {
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof(bits));
  return bits;
}

uint16_t Fp32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);  // round to even
}

void AppendU16(uint16_t v, std::vector<uint8_t>* out) {
  out->push_back(static_cast<uint8_t>(v));
  out->push_back(static_cast<uint8_t>(v >> 8));
}

// ggml's block encodings of `values` (whole blocks for Q8_0).
std::vector<uint8_t> Encode(const std::vector<float>& values, GgmlType type) {
  std::vector<uint8_t> out;
  switch (type) {
    case GgmlType::kF16:
      for (float v : values) AppendU16(ToBits(static_cast<_Float16>(v)), &out);
      break;
    case GgmlType::kBF16:
      for (float v : values) AppendU16(Fp32ToBf16(v), &out);
      break;
    case GgmlType::kQ8_0:
      for (size_t b = 0; b < values.size(); b += 32) {
        float amax = 0;
        for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(values[i]));
        const float d = amax / 127.0f;
        AppendU16(ToBits(static_cast<_Float16>(d)), &out);
        for (size_t i = b; i < b + 32; ++i) {
          out.push_back(static_cast<uint8_t>(
              static_cast<int8_t>(d == 0 ? 0 : std::lround(values[i] / d))));
        }
      }
      break;
    default:
      out.resize(values.size() * sizeof(float));
      std::memcpy(out.data(), values.data(), out.size());
  }
  return out;
}

class TensorMaker {
 public:
  TensorMaker(GgufWriter* writer, uint64_t seed) : writer_(writer), rng_(seed) {}

  // A [rows, cols] matrix (ggml dims {cols, rows}) with N(0, 1/cols) entries.
  absl::Status Matrix(const std::string& name, int64_t rows, int64_t cols, GgmlType type) {
    std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
    std::vector<float> values(rows * cols);
    for (float& v : values) v = normal(rng_);
    return writer_->AddTensor(name, type, {cols, rows}, Encode(values, type));
  }

  absl::Status NormWeight(const std::string& name, int64_t size) {
    std::uniform_real_distribution<float> uniform(0.8f, 1.2f);
    std::vector<float> values(size);
    for (float& v : values) v = uniform(rng_);
    return writer_->AddTensor(name, GgmlType::kF32, {size}, Encode(values, GgmlType::kF32));
  }

 private:
  GgufWriter* writer_;
  std::mt19937_64 rng_;
};

void WriteTokenizer(const SyntheticModelSpec& spec, GgufWriter* writer) {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  std::vector<int32_t> types(kSpecialTokens, 3);  // control
  for (int byte = 0; byte < 256; ++byte) {
    tokens.push_back(MapBytes(std::string(1, static_cast<char>(byte))));
    types.push_back(1);  // normal
  }
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < spec.vocab; ++i) {
    tokens.push_back(absl::StrCat("<|filler_", i, "|>"));
    types.push_back(3);
  }
  writer->SetString("tokenizer.ggml.model", "gpt2");
  writer->SetString("tokenizer.ggml.pre", "smollm");
  writer->SetStringArray("tokenizer.ggml.tokens", tokens);
  writer->SetInt32Array("tokenizer.ggml.token_type", types);
  writer->SetStringArray("tokenizer.ggml.merges", {});
  writer->SetUint32("tokenizer.ggml.bos_token_id", 1);
  writer->SetUint32("tokenizer.ggml.eos_token_id", 2);
  writer->SetBool("tokenizer.ggml.add_bos_token", false);
  writer->SetString("tokenizer.chat_template", kChatMlTemplate);
}

}  // namespace

absl::Status ValidateSyntheticModelSpec(const SyntheticModelSpec& spec) {
  auto fail = [](const std::string& message) { return absl::InvalidArgumentError(message); };
  if (spec.layers < 1) return fail("layers must be at least 1");
  if (spec.heads < 1 || spec.kv_heads < 1) return fail("heads and kv_heads must be positive");
  if (spec.hidden % spec.heads != 0) {
    return fail(absl::StrCat("hidden (", spec.hidden, ") must be a multiple of heads (",
                             spec.heads, ")"));
  }
  if ((spec.hidden / spec.heads) % 2 != 0) return fail("hidden / heads must be even for RoPE");
  if (spec.heads % spec.kv_heads != 0) {
    return fail(absl::StrCat("heads (", spec.heads, ") must be a multiple of kv_heads (",
                             spec.kv_heads, ")"));
  }
  if (spec.ffn < 1) return fail("ffn must be positive");
  if (spec.vocab < kSpecialTokens + 256) return fail("vocab must be at least 259");
  if (spec.context_length < 1) return fail("context length must be positive");
  const bool supported = spec.dtype == GgmlType::kF32 || spec.dtype == GgmlType::kF16 ||
                         spec.dtype == GgmlType::kBF16 || spec.dtype == GgmlType::kQ8_0;
  if (!supported) return fail("dtype must be f32, f16, bf16 or q8_0");
  if (spec.dtype == GgmlType::kQ8_0 && (spec.hidden % 32 != 0 || spec.ffn % 32 != 0)) {
    return fail("q8_0 needs hidden and ffn to be multiples of 32");
  }
  return absl::OkStatus();
}

absl::Status WriteSyntheticModel(const SyntheticModelSpec& spec, const std::string& path) {
  RETURN_IF_ERROR(ValidateSyntheticModelSpec(spec));
  const int64_t head_dim = spec.hidden / spec.heads;
  GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  writer.SetString("general.name", "tpserve synthetic");
  writer.SetUint32("llama.block_count", spec.layers);
  writer.SetUint32("llama.context_length", spec.context_length);
  writer.SetUint32("llama.embedding_length", spec.hidden);
  writer.SetUint32("llama.feed_forward_length", spec.ffn);
  writer.SetUint32("llama.attention.head_count", spec.heads);
  writer.SetUint32("llama.attention.head_count_kv", spec.kv_heads);
  writer.SetFloat32("llama.rope.freq_base", static_cast<float>(spec.rope_theta));
  writer.SetUint32("llama.rope.dimension_count", head_dim);
  writer.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  writer.SetUint32("llama.vocab_size", spec.vocab);
  WriteTokenizer(spec, &writer);

  TensorMaker make(&writer, spec.seed);
  RETURN_IF_ERROR(make.Matrix("token_embd.weight", spec.vocab, spec.hidden, spec.dtype));
  RETURN_IF_ERROR(make.NormWeight("output_norm.weight", spec.hidden));
  RETURN_IF_ERROR(make.Matrix("output.weight", spec.vocab, spec.hidden, spec.dtype));
  for (int64_t layer = 0; layer < spec.layers; ++layer) {
    const std::string p = absl::StrCat("blk.", layer, ".");
    RETURN_IF_ERROR(make.NormWeight(p + "attn_norm.weight", spec.hidden));
    RETURN_IF_ERROR(make.Matrix(p + "attn_q.weight", spec.hidden, spec.hidden, spec.dtype));
    RETURN_IF_ERROR(
        make.Matrix(p + "attn_k.weight", spec.kv_heads * head_dim, spec.hidden, spec.dtype));
    RETURN_IF_ERROR(
        make.Matrix(p + "attn_v.weight", spec.kv_heads * head_dim, spec.hidden, spec.dtype));
    RETURN_IF_ERROR(make.Matrix(p + "attn_output.weight", spec.hidden, spec.hidden, spec.dtype));
    RETURN_IF_ERROR(make.NormWeight(p + "ffn_norm.weight", spec.hidden));
    RETURN_IF_ERROR(make.Matrix(p + "ffn_gate.weight", spec.ffn, spec.hidden, spec.dtype));
    RETURN_IF_ERROR(make.Matrix(p + "ffn_up.weight", spec.ffn, spec.hidden, spec.dtype));
    RETURN_IF_ERROR(make.Matrix(p + "ffn_down.weight", spec.hidden, spec.ffn, spec.dtype));
  }
  return writer.WriteFile(path);
}

}  // namespace tpserve
