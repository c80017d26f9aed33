// The CUDA model against the CPU model on each model family's random-weight shape: Qwen2 (q/k/v
// biases, rotate-half RoPE; tied, and untied with linear RoPE scaling), Llama with Llama-3.1's
// llama3 RoPE scaling, Mistral's 8 heads over 2 KV heads, Qwen3 (per-head q/k norms, heads
// wider than hidden / heads) and Gemma 3 (GELU, norms around each block, local and global layers).
// The CPU model is checked against an independent reference of the HF formulas
// (tests/integration/logits_families_test.py), so it is the reference here; the bar is
// cuda_forward_pass_test's bf16 one, scaled to 2 layers: a family feature missing or misplaced on
// the device (a bias dropped, the other RoPE pairing, the unscaled table) moves the logits by far
// more.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/synthetic_model.h"
#include "tests/gpu/gpu_test_util.h"
#include "worker/comm/single_rank_communicator.h"
#include "worker/comm/single_rank_device_communicator.h"
#include "worker/forward_batch.h"
#include "worker/loaded_shard.h"

namespace tpserve {
namespace {

constexpr int64_t kBlockSize = 16;
// ~2 layers × ~10 bf16 roundings each, as a random walk: ~sqrt(20) × 2^-9 ≈ 0.9%.
constexpr double kBf16Tolerance = 0.03;

struct Family {
  std::string name;
  SyntheticModelSpec spec;
};

std::vector<Family> Families() {
  SyntheticModelSpec base;
  base.layers = 2;
  base.hidden = 256;
  base.heads = 4;
  base.kv_heads = 2;
  base.ffn = 512;
  base.vocab = 512;
  base.context_length = 1024;
  std::vector<Family> families;
  SyntheticModelSpec qwen2_tied = base;
  qwen2_tied.architecture = "qwen2";
  qwen2_tied.tied_embeddings = true;
  qwen2_tied.rope_theta = 1e6;
  families.push_back({"qwen2_tied", qwen2_tied});
  SyntheticModelSpec qwen2_linear = base;
  qwen2_linear.architecture = "qwen2";
  qwen2_linear.rope_scaling = "linear";
  qwen2_linear.rope_scaling_factor = 4;
  families.push_back({"qwen2_untied_linear_rope", qwen2_linear});
  SyntheticModelSpec llama3 = base;
  llama3.rope_theta = 500000;
  llama3.rope_scaling = "llama3";
  llama3.rope_original_context = 64;
  families.push_back({"llama3_rope", llama3});
  SyntheticModelSpec mistral = base;
  mistral.hidden = 512;  // head_dim 64: the CUDA attention kernels take 64 and 128
  mistral.heads = 8;
  mistral.kv_heads = 2;
  mistral.rope_theta = 1e6;
  mistral.sliding_window = 512;
  families.push_back({"mistral", mistral});
  // Qwen3: per-head q/k norms (QkHeadRmsNorm), 4 heads of 128 over a hidden size of 256.
  SyntheticModelSpec qwen3 = base;
  qwen3.architecture = "qwen3";
  qwen3.head_dim = 128;
  qwen3.tied_embeddings = true;
  qwen3.rope_theta = 1e6;
  families.push_back({"qwen3", qwen3});
  // Gemma 3: GELU gating, sqrt(hidden) embedding scale, block-output norms; 7 layers so that
  // layer 6 is global (scaled RoPE) and the others local (their own base).
  SyntheticModelSpec gemma3 = base;
  gemma3.architecture = "gemma3";
  gemma3.layers = 7;
  gemma3.kv_heads = 1;
  gemma3.head_dim = 128;
  gemma3.tied_embeddings = true;
  gemma3.rope_theta = 1e6;
  gemma3.rope_scaling = "linear";
  gemma3.sliding_window = 512;
  families.push_back({"gemma3", gemma3});
  // Q4_K with Q6_K parts: packed on the host, decoded there for the device (a stack for the qkv of
  // layer 0, whose v is Q6_K).
  SyntheticModelSpec k_quants = base;
  k_quants.dtype = GgmlType::kQ4_K;
  k_quants.k_quant_mix = true;
  families.push_back({"q4_k_m", k_quants});
  return families;
}

std::unique_ptr<LoadedShard> Load(const std::string& path, Device device, Communicator* comm,
                                  DeviceCommunicator* device_comm) {
  ModelRunnerOptions options;
  options.model_path = path;
  options.device = device;
  // The CPU side decodes at load and multiplies in fp32: the reference for the device's bf16.
  if (device == Device::kCpu) options.cpu_weights = CpuWeights::kFp32;
  options.block_size = kBlockSize;
  options.kv_cache_blocks = 16;
  options.cuda.max_num_seqs = 4;
  options.cuda.max_num_batched_tokens = 128;
  options.cuda.enforce_eager = true;
  auto model = LoadShard(options, comm, device_comm);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

std::vector<float> Forward(LoadedShard& model, const ForwardBatch& batch) {
  std::vector<float> logits;
  const absl::Status status = model.forward_pass().Forward(batch, &logits);
  EXPECT_TRUE(status.ok()) << status;
  return logits;
}

TEST(CudaFamilies, PrefillLogitsMatchTheCpu) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  SingleRankCommunicator comm;
  SingleRankDeviceCommunicator device_comm;
  std::vector<int32_t> prompt(40);
  for (int i = 0; i < 40; ++i) prompt[i] = (i * 37 + 11) % 500;
  std::vector<int32_t> table(3);
  std::iota(table.begin(), table.end(), 0);
  for (const Family& family : Families()) {
    const std::string path = (std::filesystem::temp_directory_path() /
                              absl::StrCat("tpserve-family-", family.name, "-", getpid(), ".gguf"))
                                 .string();
    ASSERT_TRUE(WriteSyntheticModel(family.spec, path).ok()) << family.name;
    auto cpu = Load(path, Device::kCpu, &comm, &device_comm);
    auto gpu = Load(path, Device::kCuda, &comm, &device_comm);
    ASSERT_TRUE(cpu != nullptr && gpu != nullptr) << family.name;
    ForwardBatchBuilder builder(kBlockSize);
    builder.AddSequence(prompt, 0, table, /*all_logits=*/true);
    const ForwardBatch batch = builder.Build();
    const double error = gpu_test::NormalizedError(Forward(*gpu, batch), Forward(*cpu, batch));
    std::printf("%s: normalized error %.4f\n", family.name.c_str(), error);
    EXPECT_LE(error, kBf16Tolerance) << family.name;
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace tpserve
