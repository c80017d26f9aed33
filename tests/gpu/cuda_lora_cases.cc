// LoRA on CUDA workers (worker/cuda/cuda_lora_pool.h): the batched product kernel against the CPU
// product (kernels/cpu/lora_product.h) on the same bf16-rounded inputs, and the CUDA model with
// adapters against the CPU model with the same adapters, which lora_test.py checks against the
// published formula (base + B·A·x·scale) in float64.
//
// The adapters are made in memory (random A and B, the PEFT loader has its own tests): one on all
// seven projections at rank 16, one on q and v at rank 5 (a rank that is no multiple of the
// kernel's warps, and five targets the adapter leaves alone). The bar for the model is
// cuda_forward_pass_test's bf16 tolerance; each adapter moves the CPU model's logits at least twice
// that far from the base model's (0.32 to 0.52 on SmolLM2-135M, 1.3 to 1.4 on its random-weight
// shape), so an adapter left out or applied to the wrong tokens fails.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/lora_product.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/lora_product.h"
#include "model/lora_adapter.h"
#include "tests/gpu/gpu_test_model.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/model_steps.h"
#include "worker/comm/single_rank_communicator.h"
#include "worker/comm/single_rank_device_communicator.h"
#include "worker/cuda/cuda_forward_pass.h"
#include "worker/forward_batch.h"
#include "worker/loaded_shard.h"
#include "worker/lora_shard.h"

namespace tpserve {
namespace {

using gpu_test::Forward;
using gpu_test::Prompt;

using cuda::bf16;

constexpr int64_t kBlockSize = 16;
constexpr int64_t kBlocks = 64;
constexpr double kBf16Tolerance = 0.08;

std::vector<float> RandomBf16Values(int64_t count, float scale, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(count);
  for (float& x : v) x = cuda::ToFloat(cuda::ToBf16(normal(rng)));  // exact in bf16
  return v;
}

TEST(CudaLoraProduct, MatchesTheCpuProductForGroupsOfSeveralSlots) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  std::mt19937 rng(5);
  const int64_t in = 200, out = 300, max_rank = 24, tokens = 23, slots = 3;
  // Slot 1: rank 24; slot 2: rank 5; slot 3: leaves this module alone (rank 0).
  const int32_t ranks[slots] = {24, 5, 0};
  // Each slot's A [max_rank, in] and Bᵀ [max_rank, out] at the start of its `stride` elements.
  const int64_t stride = max_rank * std::max(in, out);
  std::vector<float> a(slots * stride), bt(slots * stride);
  for (int64_t s = 0; s < slots; ++s) {
    const std::vector<float> sa = RandomBf16Values(max_rank * in, 0.1f, rng);
    const std::vector<float> sb = RandomBf16Values(max_rank * out, 0.1f, rng);
    std::copy(sa.begin(), sa.end(), a.begin() + s * stride);
    std::copy(sb.begin(), sb.end(), bt.begin() + s * stride);
  }
  const std::vector<float> x = RandomBf16Values(tokens * in, 1.0f, rng);
  const std::vector<float> y0 = RandomBf16Values(tokens * out, 1.0f, rng);
  // Slot 1 has 8 + 4 tokens (not in order), slot 2 one, slot 3 two; the others run the base
  // model.
  const std::vector<std::pair<int32_t, std::vector<int32_t>>> groups = {
      {1, {0, 2, 4, 6, 8, 10, 12, 14}}, {2, {1}}, {1, {16, 3, 5, 7}}, {3, {9, 11}}};
  std::vector<int32_t> words;
  for (const auto& [slot, members] : groups) {
    words.push_back(slot);
    words.push_back(static_cast<int32_t>(members.size()));
    for (int i = 0; i < cuda::kLoraGroupTokens; ++i) {
      words.push_back(i < static_cast<int>(members.size()) ? members[i] : 0);
    }
  }

  // The reference: the CPU product per group, on the same values.
  std::vector<float> want = y0;
  for (const auto& [slot, members] : groups) {
    const int64_t rank = ranks[slot - 1];
    if (rank == 0) continue;
    std::vector<const float*> xs;
    std::vector<float*> ys;
    for (int32_t t : members) {
      xs.push_back(x.data() + t * in);
      ys.push_back(want.data() + t * out);
    }
    cpu::LoraProduct(a.data() + (slot - 1) * stride, bt.data() + (slot - 1) * stride, rank, in, out,
                     xs.data(), ys.data(), static_cast<int64_t>(members.size()));
  }

  absl::StatusOr<cuda::CudaStream> stream = cuda::CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto d_a = gpu_test::Upload(cuda::ToBf16(a), stream->get());
  auto d_bt = gpu_test::Upload(cuda::ToBf16(bt), stream->get());
  auto d_ranks = gpu_test::Upload(std::vector<int32_t>(ranks, ranks + slots), stream->get());
  auto d_groups = gpu_test::Upload(words, stream->get());
  auto d_x = gpu_test::Upload(cuda::ToBf16(x), stream->get());
  auto d_y = gpu_test::Upload(cuda::ToBf16(y0), stream->get());
  auto scratch = cuda::DeviceBuffer<float>::Allocate(static_cast<int64_t>(groups.size()) *
                                                     cuda::kLoraGroupTokens * max_rank);
  ASSERT_TRUE(scratch.ok());
  cuda::LoraProductParams p;
  p.groups = d_groups.data();
  p.num_groups = static_cast<int64_t>(groups.size());
  p.a = d_a.data();
  p.bt = d_bt.data();
  p.slot_stride = stride;
  p.ranks = d_ranks.data();
  p.rank_stride = 1;
  p.max_rank = max_rank;
  p.in = in;
  p.out = out;
  p.x = d_x.data();
  p.x_stride = in;
  p.y = d_y.data();
  p.y_stride = out;
  p.scratch = scratch->data();
  cuda::LoraProduct(p, stream->get());
  const std::vector<float> got = cuda::ToFloat(gpu_test::Download(d_y, stream->get()));
  // One bf16 rounding of each output (2^-9 relative) on top of fp32 sums.
  EXPECT_LE(gpu_test::NormalizedError(got, want), 4e-3);
  // Tokens of no group, and those of slot 3, are untouched, bit for bit.
  for (int32_t t : {9, 11, 13, 15, 17, 18, 19, 20, 21, 22}) {
    for (int64_t j = 0; j < out; ++j) ASSERT_EQ(got[t * out + j], y0[t * out + j]) << t;
  }
  EXPECT_GT(gpu_test::NormalizedError(want, y0), 0.1);  // the product is not negligible
}

// Adapter `rank` on `targets` of every layer, random, for `config`'s shapes.
LoraAdapter RandomAdapter(const ModelConfig& config, int64_t rank,
                          std::initializer_list<LoraTarget> targets, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t hidden = config.hidden_size;
  const int64_t q = config.num_heads * config.head_dim;
  const int64_t kv = config.num_kv_heads * config.head_dim;
  const int64_t ffn = config.intermediate_size;
  LoraAdapter adapter;
  adapter.rank = rank;
  adapter.layers.resize(config.num_layers);
  for (auto& layer : adapter.layers) {
    for (LoraTarget t : targets) {
      const auto [out, in] = [&]() -> std::pair<int64_t, int64_t> {
        switch (t) {
          case LoraTarget::kQ:
            return {q, hidden};
          case LoraTarget::kK:
          case LoraTarget::kV:
            return {kv, hidden};
          case LoraTarget::kO:
            return {hidden, q};
          case LoraTarget::kGate:
          case LoraTarget::kUp:
            return {ffn, hidden};
          case LoraTarget::kDown:
            return {hidden, ffn};
        }
        return {0, 0};
      }();
      // A · x has entries of x's size, and so has B · (A · x): as large as the base output.
      layer[static_cast<int>(t)] =
          LoraModule{in, out, RandomBf16Values(rank * in, 1.0f / std::sqrt(in), rng),
                     RandomBf16Values(out * rank, 1.0f / std::sqrt(rank), rng)};
    }
  }
  return adapter;
}

std::unique_ptr<LoadedShard> MakeRunner(Device device, bool enforce_eager, Communicator* comm,
                                        DeviceCommunicator* device_comm) {
  ModelRunnerOptions options;
  options.model_path = gpu_test::GetTestModel().path;
  options.device = device;
  options.block_size = kBlockSize;
  options.kv_cache_blocks = kBlocks;
  options.cuda.max_num_seqs = 8;
  options.cuda.max_num_batched_tokens = 256;
  options.cuda.enforce_eager = enforce_eager;
  options.max_loras = 2;
  options.max_lora_rank = 16;
  auto runner = LoadShard(options, comm, device_comm);
  EXPECT_TRUE(runner.ok()) << runner.status();
  return runner.ok() ? *std::move(runner) : nullptr;
}

// Rows [first, first + count) of [rows, vocab] logits.
std::vector<float> Rows(const std::vector<float>& logits, int64_t vocab, int64_t first,
                        int64_t count) {
  return std::vector<float>(logits.begin() + first * vocab,
                            logits.begin() + (first + count) * vocab);
}

class CudaLoraModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TP_SKIP_WITHOUT_CUDA_DEVICES(1);
    cpu_ = MakeRunner(Device::kCpu, true, &comm_, &device_comm_);
    ASSERT_NE(cpu_, nullptr);
    const ModelConfig& config = cpu_->config();
    all16_ = std::make_shared<const LoraShard>(
        ShardLora(RandomAdapter(config, 16,
                                {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV, LoraTarget::kO,
                                 LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown},
                                1),
                  config, cpu_->layout()));
    qv5_ = std::make_shared<const LoraShard>(ShardLora(
        RandomAdapter(config, 5, {LoraTarget::kQ, LoraTarget::kV}, 2), config, cpu_->layout()));
  }

  // Four sequences in one prefill (base, slot 1, slot 2, slot 1), a fresh 4 blocks each; every
  // token's logits.
  static ForwardBatch MixedPrefill(const std::vector<std::vector<int32_t>>& prompts) {
    const int32_t slots[] = {0, 1, 2, 1};
    ForwardBatchBuilder builder(kBlockSize);
    for (int s = 0; s < 4; ++s) {
      std::vector<int32_t> table(4);
      std::iota(table.begin(), table.end(), 4 * s);
      builder.AddSequenceWithLogits(prompts[s], 0, table, static_cast<int64_t>(prompts[s].size()),
                                    slots[s]);
    }
    return builder.Build();
  }

  SingleRankCommunicator comm_;
  SingleRankDeviceCommunicator device_comm_;
  std::unique_ptr<LoadedShard> cpu_;
  std::shared_ptr<const LoraShard> all16_, qv5_;
};

TEST_F(CudaLoraModelTest, AMixedBatchMatchesTheCpuModelAndTheBaseRowsAreTheBaseModels) {
  auto gpu = MakeRunner(Device::kCuda, /*enforce_eager=*/false, &comm_, &device_comm_);
  ASSERT_NE(gpu, nullptr);
  for (LoadedShard* r : {cpu_.get(), gpu.get()}) {
    r->loras().Set(1, all16_);
    r->loras().Set(2, qv5_);
  }
  const int64_t vocab = cpu_->config().vocab_size;
  // Sequences 1 and 3 share a prompt under the same adapter: the same logits from two groups.
  const std::vector<std::vector<int32_t>> prompts = {Prompt(13, 1), Prompt(21, 2), Prompt(9, 3),
                                                     Prompt(21, 2)};
  const ForwardBatch mixed = MixedPrefill(prompts);
  const std::vector<float> want = Forward(*cpu_, mixed);
  const std::vector<float> got = Forward(*gpu, mixed);
  // The same prompts on the base model alone.
  ForwardBatch base = mixed;
  std::fill(base.adapters.begin(), base.adapters.end(), 0);
  const std::vector<float> base_logits = Forward(*cpu_, base);

  int64_t first = 0;
  for (int s = 0; s < 4; ++s) {
    const int64_t n = static_cast<int64_t>(prompts[s].size());
    const double error =
        gpu_test::NormalizedError(Rows(got, vocab, first, n), Rows(want, vocab, first, n));
    const double moved =
        gpu_test::NormalizedError(Rows(want, vocab, first, n), Rows(base_logits, vocab, first, n));
    std::printf("sequence %d (slot %d): error %.4f, adapter moved the logits by %.4f\n", s,
                mixed.adapters[s], error, moved);
    EXPECT_LE(error, kBf16Tolerance) << s;
    if (s == 0) {
      EXPECT_EQ(moved, 0.0);
    } else {
      EXPECT_GE(moved, 2 * kBf16Tolerance) << s;
    }
    first += n;
  }
}

TEST_F(CudaLoraModelTest, DecodeWithAdaptersRunsEagerlyAndANewAdapterInASlotIsUploaded) {
  auto gpu = MakeRunner(Device::kCuda, /*enforce_eager=*/false, &comm_, &device_comm_);
  ASSERT_NE(gpu, nullptr);
  auto& model = dynamic_cast<cuda::CudaForwardPass&>(gpu->forward_pass());
  ASSERT_GT(model.num_decode_graphs(), 0u);
  for (LoadedShard* r : {cpu_.get(), gpu.get()}) {
    r->loras().Set(1, all16_);
    r->loras().Set(2, qv5_);
  }
  const int64_t vocab = cpu_->config().vocab_size;
  std::vector<std::vector<int32_t>> tokens = {Prompt(13, 1), Prompt(21, 2), Prompt(9, 3),
                                              Prompt(17, 4)};
  Forward(*cpu_, MixedPrefill(tokens));
  Forward(*gpu, MixedPrefill(tokens));
  // Decode steps: first with the adapters, then with every sequence on the base model (a graph
  // step), then slot 1 holding the q/v adapter instead, which the GPU must upload.
  const std::vector<std::vector<int32_t>> step_slots = {{0, 1, 2, 1}, {0, 0, 0, 0}, {1, 1, 0, 2}};
  for (size_t step = 0; step < step_slots.size(); ++step) {
    if (step == 2) {
      cpu_->loras().Set(1, qv5_);
      gpu->loras().Set(1, qv5_);
    }
    ForwardBatchBuilder decode(kBlockSize);
    for (int s = 0; s < 4; ++s) {
      tokens[s].push_back(static_cast<int32_t>(200 + 7 * s + step));
      std::vector<int32_t> table(4);
      std::iota(table.begin(), table.end(), 4 * s);
      decode.AddSequenceWithLogits({tokens[s].back()}, static_cast<int32_t>(tokens[s].size() - 1),
                                   table, 1, step_slots[step][s]);
    }
    const ForwardBatch batch = decode.Build();
    const int64_t graph_steps = model.graph_steps();
    const std::vector<float> want = Forward(*cpu_, batch);
    const std::vector<float> got = Forward(*gpu, batch);
    for (int s = 0; s < 4; ++s) {
      EXPECT_LE(gpu_test::NormalizedError(Rows(got, vocab, s, 1), Rows(want, vocab, s, 1)),
                kBf16Tolerance)
          << "step " << step << " sequence " << s;
    }
    EXPECT_EQ(model.graph_steps() - graph_steps, step == 1 ? 1 : 0) << step;
  }
}

TEST_F(CudaLoraModelTest, AStepWithAnEmptySlotIsRefused) {
  auto gpu = MakeRunner(Device::kCuda, /*enforce_eager=*/true, &comm_, &device_comm_);
  ASSERT_NE(gpu, nullptr);
  ForwardBatchBuilder builder(kBlockSize);
  builder.AddSequenceWithLogits(Prompt(5, 1), 0, {0}, 1, /*adapter=*/2);
  std::vector<float> logits;
  const absl::Status status = gpu->forward_pass().Forward(builder.Build(), &logits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("slot 2"), std::string::npos) << status;
}

}  // namespace
}  // namespace tpserve
