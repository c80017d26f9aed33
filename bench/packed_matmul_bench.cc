// The CPU packed products of one decoder layer (cpu::PackedMatmulBT), per weight format: the qkv,
// o, gate_up and down projections of a Llama-like layer (hidden 2048, ffn 5632, 16 heads over 4
// KV heads: bench/compare_quant_types.sh's shape) against m activation rows, on this machine's
// best instruction set and the kernels' thread pool. Bytes/s counts the packed weight bytes read
// once per iteration: at m = 1 this is a decode step's GEMV, which memory bandwidth bounds once
// the weights outgrow the caches.
//
//   tpserve-bench-packed [--benchmark_filter=BM_PackedLayer/Q4_K] [--benchmark_min_time=...]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/packed_weight.h"
#include "model/ggml_type.h"
#include "model/quantize.h"

namespace tpserve {
namespace {

struct Projection {
  int64_t rows, cols;
};
constexpr Projection kLayer[] = {{3072, 2048}, {2048, 2048}, {2 * 5632, 2048}, {2048, 5632}};

struct FormatCase {
  const char* name;
  cpu::BlockFormat format;
  GgmlType type;
};
constexpr FormatCase kFormats[] = {{"Q4_0", cpu::BlockFormat::kQ4_0, GgmlType::kQ4_0},
                                   {"Q4_1", cpu::BlockFormat::kQ4_1, GgmlType::kQ4_1},
                                   {"Q8_0", cpu::BlockFormat::kQ8_0, GgmlType::kQ8_0},
                                   {"Q4_K", cpu::BlockFormat::kQ4_K, GgmlType::kQ4_K},
                                   {"Q5_K", cpu::BlockFormat::kQ5_K, GgmlType::kQ5_K},
                                   {"Q6_K", cpu::BlockFormat::kQ6_K, GgmlType::kQ6_K}};

std::vector<float> Normal(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Arguments: m, the number of layers run one after the other, and the activations' bits (8 or
// 16: --cpu-weights packed or packed-a16, their rounding timed with the products). One layer's
// weights (24-45 MB) partly fit a server CPU's last-level cache; eight are read from memory, as a
// decode step reads a model's.
void BM_PackedLayer(benchmark::State& state, FormatCase format) {
  const int64_t m = state.range(0);
  const int64_t layers = state.range(1);
  const cpu::ActivationBits bits =
      state.range(2) == 16 ? cpu::ActivationBits::k16 : cpu::ActivationBits::k8;
  std::vector<cpu::PackedWeight> weights;
  int64_t bytes = 0;
  for (int64_t layer = 0; layer < layers; ++layer) {
    for (const Projection& p : kLayer) {
      const std::vector<uint8_t> blocks =
          EncodeBlocks(Normal(p.rows * p.cols, weights.size() + 1), format.type);
      weights.push_back(cpu::PackWeight(format.format, blocks.data(), p.rows, p.cols));
      bytes += static_cast<int64_t>(weights.back().data.size() + weights.back().super.size());
    }
  }
  std::vector<std::vector<float>> inputs;
  for (size_t i = 0; i < weights.size(); ++i) inputs.push_back(Normal(m * weights[i].cols, 100 + i));
  std::vector<float> out(m * 2 * 5632);
  const cpu::PackedIsa isa = cpu::BestPackedIsa();
  for (auto _ : state) {
    for (size_t i = 0; i < weights.size(); ++i) {
      cpu::PackedMatmulBT(inputs[i].data(), m, weights[i], 0, weights[i].rows, out.data(), bits);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetLabel(cpu::PackedIsaName(isa));
}

// The same layer's fp32 products (cpu::MatmulBT): an F32, F16 or BF16 model on the CPU, which
// reads 4 bytes per weight, so at a few rows (a decode step, or the verification of speculated
// tokens) reading the weights is the whole cost.
void BM_Fp32Layer(benchmark::State& state) {
  const int64_t m = state.range(0);
  std::vector<std::vector<float>> weights, inputs;
  int64_t bytes = 0;
  for (const Projection& p : kLayer) {
    weights.push_back(Normal(p.rows * p.cols, weights.size() + 1));
    inputs.push_back(Normal(m * p.cols, 100 + inputs.size()));
    bytes += p.rows * p.cols * static_cast<int64_t>(sizeof(float));
  }
  std::vector<float> out(m * 2 * 5632);
  for (auto _ : state) {
    for (size_t i = 0; i < weights.size(); ++i) {
      cpu::MatmulBT(inputs[i].data(), weights[i].data(), m, kLayer[i].rows, kLayer[i].cols,
                    out.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_Fp32Layer)
    ->Arg(1)
    ->Arg(2)
    ->Arg(5)
    ->Arg(9)
    ->Arg(16)
    ->Arg(64)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  for (const tpserve::FormatCase& f : tpserve::kFormats) {
    benchmark::RegisterBenchmark((std::string("BM_PackedLayer/") + f.name).c_str(),
                                 tpserve::BM_PackedLayer, f)
        ->ArgNames({"m", "layers", "bits"})
        ->ArgsProduct({{1, 8, 64}, {1}, {8, 16}})
        ->Args({1, 8, 8})
        ->Args({1, 8, 16})
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  std::fprintf(stderr, "tpserve-bench-packed: quantizing a layer per format before each run\n");
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
