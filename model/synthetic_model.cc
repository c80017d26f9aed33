#include "model/synthetic_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/gguf_file.h"
#include "model/gguf_writer.h"
#include "model/quantize.h"
#include "model/rope_frequencies.h"
#include "model/tokenizer.h"

namespace tpserve {
namespace {

constexpr int64_t kSpecialTokens = 3;  // <|endoftext|>, <|im_start|>, <|im_end|>
constexpr char kChatMlTemplate[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

class TensorMaker {
 public:
  TensorMaker(GgufWriter* writer, uint64_t seed) : writer_(writer), rng_(seed) {}

  // A [rows, cols] matrix (ggml dims {cols, rows}) with N(0, 1/cols) entries.
  // Filled in fixed-size chunks, each from its own stream seeded by the tensor's draw and the
  // chunk's index, so the values do not depend on how many threads fill them: an 8B-shaped model
  // holds billions of values, minutes on one thread.
  absl::Status Matrix(const std::string& name, int64_t rows, int64_t cols, GgmlType type) {
    const float stddev = 1.0f / std::sqrt(static_cast<float>(cols));
    const uint64_t tensor_seed = rng_();
    std::vector<float> values(rows * cols);
    constexpr int64_t kChunk = int64_t{1} << 20;
    const int64_t chunks = (static_cast<int64_t>(values.size()) + kChunk - 1) / kChunk;
    std::atomic<int64_t> next{0};
    auto fill = [&] {
      for (int64_t c = next++; c < chunks; c = next++) {
        std::seed_seq seq{tensor_seed, static_cast<uint64_t>(c)};
        std::mt19937_64 rng(seq);
        std::normal_distribution<float> normal(0.0f, stddev);
        const int64_t end = std::min<int64_t>((c + 1) * kChunk, values.size());
        for (int64_t i = c * kChunk; i < end; ++i) values[i] = normal(rng);
      }
    };
    const int64_t threads =
        std::min<int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> workers;
    for (int64_t t = 1; t < threads; ++t) workers.emplace_back(fill);
    fill();
    for (std::thread& worker : workers) worker.join();
    return writer_->AddTensor(name, type, {cols, rows}, EncodeBlocks(values, type));
  }

  // A [size] vector with N(0, stddev²) entries, fp32 (biases).
  absl::Status Vector(const std::string& name, int64_t size, float stddev) {
    std::normal_distribution<float> normal(0.0f, stddev);
    std::vector<float> values(size);
    for (float& v : values) v = normal(rng_);
    return writer_->AddTensor(name, GgmlType::kF32, {size}, EncodeBlocks(values, GgmlType::kF32));
  }

  absl::Status NormWeight(const std::string& name, int64_t size) {
    std::uniform_real_distribution<float> uniform(0.8f, 1.2f);
    std::vector<float> values(size);
    for (float& v : values) v = uniform(rng_);
    return writer_->AddTensor(name, GgmlType::kF32, {size}, EncodeBlocks(values, GgmlType::kF32));
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
  if (spec.head_dim < 0) return fail("head_dim must not be negative");
  if (spec.head_dim == 0 && spec.hidden % spec.heads != 0) {
    return fail(absl::StrCat("hidden (", spec.hidden, ") must be a multiple of heads (", spec.heads,
                             ") without a head_dim"));
  }
  if (SyntheticHeadDim(spec) % 2 != 0) return fail("the head size must be even for RoPE");
  if (spec.heads % spec.kv_heads != 0) {
    return fail(absl::StrCat("heads (", spec.heads, ") must be a multiple of kv_heads (",
                             spec.kv_heads, ")"));
  }
  if (spec.ffn < 1) return fail("ffn must be positive");
  if (spec.vocab < kSpecialTokens + 256) return fail("vocab must be at least 259");
  if (spec.context_length < 1) return fail("context length must be positive");
  if (spec.architecture != "llama" && spec.architecture != "qwen2" &&
      spec.architecture != "qwen3" && spec.architecture != "phi3" &&
      spec.architecture != "gemma3") {
    return fail("architecture must be llama, qwen2, qwen3, phi3 or gemma3");
  }
  if (spec.architecture == "phi3" && spec.k_quant_mix) {
    return fail("phi3's fused matrices take one type: no K mix");
  }
  if (spec.rope_scaling != "none" && spec.rope_scaling != "linear" &&
      spec.rope_scaling != "llama3") {
    return fail("rope_scaling must be none, linear or llama3");
  }
  if (!(spec.rope_scaling_factor > 0)) return fail("rope_scaling_factor must be positive");
  if (spec.rope_scaling == "llama3" &&
      !(spec.rope_low_freq_factor > 0 && spec.rope_high_freq_factor > spec.rope_low_freq_factor &&
        spec.rope_original_context > 0)) {
    return fail(
        "llama3 scaling needs 0 < low_freq_factor < high_freq_factor and a positive "
        "original context");
  }
  if (spec.sliding_window < 0) return fail("sliding_window must not be negative");
  const bool supported = spec.dtype == GgmlType::kF32 || spec.dtype == GgmlType::kF16 ||
                         spec.dtype == GgmlType::kBF16 || spec.dtype == GgmlType::kQ8_0 ||
                         spec.dtype == GgmlType::kQ4_0 || spec.dtype == GgmlType::kQ4_K ||
                         spec.dtype == GgmlType::kQ5_K || spec.dtype == GgmlType::kQ6_K;
  if (!supported) return fail("dtype must be f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k");
  if (spec.k_quant_mix && spec.dtype != GgmlType::kQ4_K && spec.dtype != GgmlType::kQ5_K) {
    return fail("the K mix needs q4_k or q5_k");
  }
  const bool k_quant = spec.dtype == GgmlType::kQ4_K || spec.dtype == GgmlType::kQ5_K ||
                       spec.dtype == GgmlType::kQ6_K;
  const int64_t block = k_quant ? 256 : 32;
  if (spec.dtype != GgmlType::kF32 && spec.dtype != GgmlType::kF16 &&
      spec.dtype != GgmlType::kBF16 &&
      (spec.hidden % block != 0 || spec.ffn % block != 0 ||
       (spec.heads * SyntheticHeadDim(spec)) % block != 0)) {
    return fail(absl::StrCat(
        "this dtype needs hidden, ffn and heads * head_dim to be multiples of ", block));
  }
  return absl::OkStatus();
}

int64_t SyntheticHeadDim(const SyntheticModelSpec& spec) {
  return spec.head_dim > 0 ? spec.head_dim : spec.hidden / spec.heads;
}

// The tokenizer.* keys of the GGUF file at `path`, copied; returns the vocabulary's size.
absl::StatusOr<int64_t> CopyTokenizer(const std::string& path, GgufWriter* writer) {
  ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  ASSIGN_OR_RETURN(const std::vector<std::string> tokens,
                   file->GetStringArray("tokenizer.ggml.tokens"));
  for (const std::string& key : file->keys()) {
    if (key.rfind("tokenizer.", 0) == 0) writer->SetValue(key, *file->Find(key));
  }
  return static_cast<int64_t>(tokens.size());
}

absl::Status WriteSyntheticModel(const SyntheticModelSpec& original, const std::string& path) {
  SyntheticModelSpec spec = original;
  GgufWriter tokenizer;
  if (spec.vocab_from.empty()) {
    WriteTokenizer(spec, &tokenizer);
  } else {
    ASSIGN_OR_RETURN(spec.vocab, CopyTokenizer(spec.vocab_from, &tokenizer));
  }
  RETURN_IF_ERROR(ValidateSyntheticModelSpec(spec));
  const int64_t head_dim = SyntheticHeadDim(spec);
  const int64_t q_rows = spec.heads * head_dim;
  GgufWriter writer;
  const std::string& arch = spec.architecture;
  const std::string p = arch + ".";
  writer.SetString("general.architecture", arch);
  writer.SetString("general.name", "tpserve synthetic");
  writer.SetUint32(p + "block_count", spec.layers);
  writer.SetUint32(p + "context_length", spec.context_length);
  writer.SetUint32(p + "embedding_length", spec.hidden);
  writer.SetUint32(p + "feed_forward_length", spec.ffn);
  writer.SetUint32(p + "attention.head_count", spec.heads);
  writer.SetUint32(p + "attention.head_count_kv", spec.kv_heads);
  writer.SetFloat32(p + "rope.freq_base", static_cast<float>(spec.rope_theta));
  writer.SetUint32(p + "rope.dimension_count", head_dim);
  if (spec.head_dim > 0) {
    writer.SetUint32(p + "attention.key_length", head_dim);
    writer.SetUint32(p + "attention.value_length", head_dim);
  }
  writer.SetFloat32(p + "attention.layer_norm_rms_epsilon", 1e-5f);
  writer.SetUint32(p + "vocab_size", spec.vocab);
  if (spec.rope_scaling == "linear") {
    writer.SetString(p + "rope.scaling.type", "linear");
    writer.SetFloat32(p + "rope.scaling.factor", static_cast<float>(spec.rope_scaling_factor));
  }
  if (spec.sliding_window > 0) {
    writer.SetUint32(p + "attention.sliding_window", spec.sliding_window);
  }
  for (const auto& [key, value] : tokenizer.metadata()) writer.SetValue(key, value);

  TensorMaker make(&writer, spec.seed);
  // Q4_K_M's choice, simplified: Q6_K for the output and for attn_v and ffn_down of even layers.
  const auto mixed = [&](bool q6) { return spec.k_quant_mix && q6 ? GgmlType::kQ6_K : spec.dtype; };
  RETURN_IF_ERROR(make.Matrix("token_embd.weight", spec.vocab, spec.hidden, spec.dtype));
  RETURN_IF_ERROR(make.NormWeight("output_norm.weight", spec.hidden));
  if (!spec.tied_embeddings) {
    RETURN_IF_ERROR(make.Matrix("output.weight", spec.vocab, spec.hidden, mixed(true)));
  }
  if (spec.rope_scaling == "llama3") {
    RETURN_IF_ERROR(writer.AddTensor(
        "rope_freqs.weight", GgmlType::kF32, {head_dim / 2},
        EncodeBlocks(Llama3FrequencyDivisors(spec.rope_theta, head_dim,
                                             {spec.rope_scaling_factor, spec.rope_low_freq_factor,
                                              spec.rope_high_freq_factor,
                                              static_cast<double>(spec.rope_original_context)}),
                     GgmlType::kF32)));
  }
  const bool bias = arch == "qwen2";
  for (int64_t layer = 0; layer < spec.layers; ++layer) {
    const std::string b = absl::StrCat("blk.", layer, ".");
    const int64_t kv_rows = spec.kv_heads * head_dim;
    RETURN_IF_ERROR(make.NormWeight(b + "attn_norm.weight", spec.hidden));
    if (arch == "phi3") {  // fused [q | k | v], as llama.cpp's converter keeps Phi-3's qkv_proj
      RETURN_IF_ERROR(
          make.Matrix(b + "attn_qkv.weight", q_rows + 2 * kv_rows, spec.hidden, spec.dtype));
    } else {
      RETURN_IF_ERROR(make.Matrix(b + "attn_q.weight", q_rows, spec.hidden, spec.dtype));
      RETURN_IF_ERROR(make.Matrix(b + "attn_k.weight", kv_rows, spec.hidden, spec.dtype));
      RETURN_IF_ERROR(
          make.Matrix(b + "attn_v.weight", kv_rows, spec.hidden, mixed(layer % 2 == 0)));
    }
    if (bias) {
      // As large as the projections' outputs, so that a lost or misplaced bias shows.
      RETURN_IF_ERROR(make.Vector(b + "attn_q.bias", q_rows, 1.0f));
      RETURN_IF_ERROR(make.Vector(b + "attn_k.bias", kv_rows, 1.0f));
      RETURN_IF_ERROR(make.Vector(b + "attn_v.bias", kv_rows, 1.0f));
    }
    if (arch == "qwen3" || arch == "gemma3") {
      RETURN_IF_ERROR(make.NormWeight(b + "attn_q_norm.weight", head_dim));
      RETURN_IF_ERROR(make.NormWeight(b + "attn_k_norm.weight", head_dim));
    }
    if (arch == "gemma3") {  // the block outputs' norms
      RETURN_IF_ERROR(make.NormWeight(b + "post_attention_norm.weight", spec.hidden));
      RETURN_IF_ERROR(make.NormWeight(b + "post_ffw_norm.weight", spec.hidden));
    }
    RETURN_IF_ERROR(make.Matrix(b + "attn_output.weight", spec.hidden, q_rows, spec.dtype));
    RETURN_IF_ERROR(make.NormWeight(b + "ffn_norm.weight", spec.hidden));
    if (arch == "phi3") {  // [gate | up], Phi-3's gate_up_proj
      RETURN_IF_ERROR(make.Matrix(b + "ffn_up.weight", 2 * spec.ffn, spec.hidden, spec.dtype));
    } else {
      RETURN_IF_ERROR(make.Matrix(b + "ffn_gate.weight", spec.ffn, spec.hidden, spec.dtype));
      RETURN_IF_ERROR(make.Matrix(b + "ffn_up.weight", spec.ffn, spec.hidden, spec.dtype));
    }
    RETURN_IF_ERROR(
        make.Matrix(b + "ffn_down.weight", spec.hidden, spec.ffn, mixed(layer % 2 == 0)));
  }
  return writer.WriteFile(path);
}

}  // namespace tpserve
