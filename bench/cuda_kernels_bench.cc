// tpserve-bench-cuda: the memory-bound CUDA kernels of a decode step, in bytes per second and as a
// share of the device's peak HBM bandwidth.
//
//  - BM_GemvBf16/m/n/k: cuda::Gemm (cuBLASLt) with m = 1 and 8 tokens against the Llama-3-8B
//    weights [n, k]: q/o (4096x4096), gate/up (14336x4096), down (4096x14336), lm_head
//    (128256x4096). A decode GEMM reads the weight once, so its bytes are n·k·2 + m·(n + k)·2.
//  - BM_GemvFp8/m/n/k: the same shapes as FP8 W8A8 linears (--quantization fp8): the activations
//    quantized per token (QuantizeRowsE4m3) and Gemm::RunFp8 in the mode the device offers; its
//    bytes are n·k + 4·n (codes and scales) + m·k·2 + m·n·2.
//  - BM_DecodeAttention (when built with kernels/cuda/paged_attention.h, see
//    TPSERVE_BENCH_DECODE_ATTENTION): one layer of decode attention, batch 64, 2,048-token
//    contexts, Llama-3-8B heads (32 query, 8 KV, head_dim 128), over a bf16 (fp8 = 0) or an FP8
//    E4M3 (fp8 = 1) cache; its bytes are the K and V read.
//
// Each timed iteration enqueues kBatch back-to-back launches between two CUDA events and reports
// the time per launch (manual time), so launch gaps and event resolution do not dominate kernels
// of a few microseconds. Weights rotate through enough copies to exceed twice the L2 cache, so
// every launch reads HBM, as a real decode step does (each layer's weights are read once).
//
// Peak bandwidth: 2 (double data rate) × memory clock × bus width, from cudaDeviceGetAttribute
// (cudaDeviceProp::memoryClockRate is gone in CUDA 13); if the attributes are 0, the datasheet
// value by device name.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"
#include "common/status_macros.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_quantize.h"
#include "kernels/cuda/gemm.h"
#ifdef TPSERVE_BENCH_DECODE_ATTENTION
#include <numeric>
#include <random>

#include "kernels/cuda/paged_attention.h"
#endif

namespace tpserve::cuda {
namespace {

constexpr int kBatch = 20;  // launches per timed iteration

struct DeviceInfo {
  std::string name;
  double peak_bytes_per_second = 0.0;
  std::string peak_source;
  int64_t l2_bytes = 0;
};

// Datasheet HBM bandwidth for devices whose clock attributes read 0.
double DatasheetBandwidth(const std::string& name) {
  if (absl::StrContains(name, "H200")) return 4.8e12;
  if (absl::StrContains(name, "H100") && !absl::StrContains(name, "PCIe")) return 3.35e12;
  if (absl::StrContains(name, "H100")) return 2.0e12;
  if (absl::StrContains(name, "A100") && absl::StrContains(name, "80GB")) return 2.0e12;
  if (absl::StrContains(name, "A100")) return 1.555e12;
  return 0.0;
}

absl::StatusOr<DeviceInfo> QueryDevice() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device (", error != cudaSuccess ? cudaGetErrorString(error) : "0 devices visible",
        "): this benchmark needs a GPU"));
  }
  DeviceInfo info;
  cudaDeviceProp prop{};
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"));
  info.name = prop.name;
  int clock_khz = 0;
  int bus_bits = 0;
  int l2_bytes = 0;
  // Missing attributes read as 0; the table below covers the devices we run on.
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) != cudaSuccess) {
    clock_khz = 0;
  }
  if (cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) != cudaSuccess) {
    bus_bits = 0;
  }
  if (cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0) != cudaSuccess) l2_bytes = 0;
  cudaGetLastError();
  info.l2_bytes = l2_bytes > 0 ? l2_bytes : int64_t{64} << 20;
  if (clock_khz > 0 && bus_bits > 0) {
    info.peak_bytes_per_second = 2.0 * clock_khz * 1e3 * bus_bits / 8.0;
    info.peak_source = absl::StrCat("2 x ", clock_khz / 1000, " MHz x ", bus_bits, "-bit bus");
  } else {
    info.peak_bytes_per_second = DatasheetBandwidth(info.name);
    info.peak_source = "datasheet";
  }
  if (info.peak_bytes_per_second <= 0.0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot tell the peak memory bandwidth of '", info.name,
                     "': its clock attributes read 0 and it is not in the datasheet table"));
  }
  return info;
}

// Set in main before any benchmark runs.
DeviceInfo* g_device = nullptr;
Gemm* g_gemm = nullptr;
CudaStream* g_stream = nullptr;

void Fail(benchmark::State& state, const absl::Status& status) {
  state.SkipWithError(std::string(status.message()).c_str());
}

// Times kBatch calls of `launch(i)` per iteration and sets bytes/s and % of peak for `bytes` per
// call. `launch` returns a Status; the first error stops the benchmark.
template <typename Launch>
void TimeLaunches(benchmark::State& state, double bytes, Launch launch) {
  const cudaStream_t stream = g_stream->get();
  absl::StatusOr<CudaEvent> start = CudaEvent::Create(cudaEventDefault);
  absl::StatusOr<CudaEvent> stop = CudaEvent::Create(cudaEventDefault);
  if (!start.ok() || !stop.ok()) return Fail(state, start.ok() ? stop.status() : start.status());
  // Warm-up: builds cuBLASLt plans, loads modules, and settles clocks.
  for (int i = 0; i < kBatch; ++i) {
    if (absl::Status status = launch(i); !status.ok()) return Fail(state, status);
  }
  if (absl::Status status = g_stream->Synchronize(); !status.ok()) return Fail(state, status);
  double seconds = 0.0;
  int64_t launches = 0;
  for (auto _ : state) {
    (void)start->Record(stream);
    for (int i = 0; i < kBatch; ++i) {
      if (absl::Status status = launch(i); !status.ok()) return Fail(state, status);
    }
    (void)stop->Record(stream);
    if (absl::Status status = stop->Synchronize(); !status.ok()) return Fail(state, status);
    absl::StatusOr<float> ms = CudaEvent::ElapsedMs(*start, *stop);
    if (!ms.ok()) return Fail(state, ms.status());
    state.SetIterationTime(*ms / 1e3 / kBatch);
    seconds += *ms / 1e3;
    launches += kBatch;
  }
  const double bytes_per_second = seconds > 0.0 ? bytes * launches / seconds : 0.0;
  state.counters["MB"] = bytes / 1e6;
  state.counters["GB/s"] = bytes_per_second / 1e9;
  state.counters["%peak"] = 100.0 * bytes_per_second / g_device->peak_bytes_per_second;
}

// out[m, n] = a[m, k] · w[n, k]ᵀ in bf16, rotating through weight copies.
void BM_GemvBf16(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int64_t weight_bytes = n * k * 2;
  const int copies =
      static_cast<int>(std::max<int64_t>(1, (2 * g_device->l2_bytes) / weight_bytes + 1));
  std::vector<DeviceBuffer<bf16>> weights;
  for (int c = 0; c < copies; ++c) {
    absl::StatusOr<DeviceBuffer<bf16>> w = DeviceBuffer<bf16>::Allocate(n * k);
    if (!w.ok()) return Fail(state, w.status());
    // 0x3C3C is bf16 0.0115: finite, normal, the same for every element.
    if (absl::Status status = CudaStatus(
            cudaMemsetAsync(w->data(), 0x3C, weight_bytes, g_stream->get()), "cudaMemset");
        !status.ok()) {
      return Fail(state, status);
    }
    weights.push_back(*std::move(w));
  }
  absl::StatusOr<DeviceBuffer<bf16>> a = DeviceBuffer<bf16>::Allocate(m * k);
  absl::StatusOr<DeviceBuffer<bf16>> out = DeviceBuffer<bf16>::Allocate(m * n);
  if (!a.ok() || !out.ok()) return Fail(state, a.ok() ? out.status() : a.status());
  if (absl::Status status =
          CudaStatus(cudaMemsetAsync(a->data(), 0x3C, m * k * 2, g_stream->get()), "cudaMemset");
      !status.ok()) {
    return Fail(state, status);
  }
  const double bytes = static_cast<double>(weight_bytes) + 2.0 * m * (n + k);
  TimeLaunches(state, bytes, [&](int i) {
    return g_gemm->MatmulBT(a->data(), weights[i % copies].data(), m, n, k, out->data(),
                            g_stream->get());
  });
  state.counters["weight_copies"] = copies;
}

// The FP8 twin of BM_GemvBf16: weight codes (0x38, E4M3 1.0, with scales of 0.01) rotating
// through copies, activations quantized in every launch as the model does.
void BM_GemvFp8(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  absl::StatusOr<Fp8ScaleMode> mode = g_gemm->ChooseFp8Mode(n, k, m);
  if (!mode.ok()) return Fail(state, mode.status());
  const int64_t weight_bytes = n * k + 4 * n;
  const int copies =
      static_cast<int>(std::max<int64_t>(1, (2 * g_device->l2_bytes) / weight_bytes + 1));
  const cudaStream_t stream = g_stream->get();
  std::vector<DeviceBuffer<uint8_t>> codes;
  absl::StatusOr<DeviceBuffer<float>> scales = DeviceBuffer<float>::Allocate(std::max(n, m));
  if (!scales.ok()) return Fail(state, scales.status());
  if (absl::Status status = scales->CopyFromHost(std::vector<float>(scales->size(), 0.01f), stream);
      !status.ok()) {
    return Fail(state, status);
  }
  for (int c = 0; c < copies; ++c) {
    absl::StatusOr<DeviceBuffer<uint8_t>> w = DeviceBuffer<uint8_t>::Allocate(n * k);
    if (!w.ok()) return Fail(state, w.status());
    if (absl::Status status =
            CudaStatus(cudaMemsetAsync(w->data(), 0x38, n * k, stream), "cudaMemset");
        !status.ok()) {
      return Fail(state, status);
    }
    codes.push_back(*std::move(w));
  }
  absl::StatusOr<DeviceBuffer<bf16>> a = DeviceBuffer<bf16>::Allocate(m * k);
  absl::StatusOr<DeviceBuffer<uint8_t>> a_codes = DeviceBuffer<uint8_t>::Allocate(m * k);
  absl::StatusOr<DeviceBuffer<float>> a_scales = DeviceBuffer<float>::Allocate(m);
  absl::StatusOr<DeviceBuffer<bf16>> out = DeviceBuffer<bf16>::Allocate(m * n);
  absl::StatusOr<DeviceBuffer<float>> scratch = DeviceBuffer<float>::Allocate(m * n);
  for (const absl::Status& status :
       {a.status(), a_codes.status(), a_scales.status(), out.status(), scratch.status()}) {
    if (!status.ok()) return Fail(state, status);
  }
  if (absl::Status status =
          CudaStatus(cudaMemsetAsync(a->data(), 0x3C, m * k * 2, stream), "cudaMemset");
      !status.ok()) {
    return Fail(state, status);
  }
  const double bytes = static_cast<double>(weight_bytes) + 2.0 * m * (n + k);
  TimeLaunches(state, bytes, [&](int i) {
    QuantizeRowsE4m3(a->data(), m, k, a_codes->data(), a_scales->data(), stream);
    Fp8GemmParams p;
    p.a = a_codes->data();
    p.a_scales = a_scales->data();
    p.b = codes[i % copies].data();
    p.b_scales = scales->data();
    p.c = out->data();
    p.m = m;
    p.n = n;
    p.k = k;
    p.scratch = scratch->data();
    return g_gemm->RunFp8(p, *mode, stream);
  });
  state.counters["weight_copies"] = copies;
  state.counters["outer_vector_scales"] = *mode == Fp8ScaleMode::kOuterVector ? 1 : 0;
}

#ifdef TPSERVE_BENCH_DECODE_ATTENTION
// Hook for the decode-attention kernel (kernels/cuda/paged_attention.h): one layer's decode
// attention over a paged cache, batch 64 at 2,048 tokens of context, Llama-3-8B heads, 16-token
// blocks handed out in a shuffled order (as a long-running pool fragments).
void BM_DecodeAttention(benchmark::State& state) {
  const int64_t seqs = state.range(0), context = state.range(1);
  const bool fp8 = state.range(2) != 0;
  const int64_t heads = 32, kv_heads = 8, head_dim = 128, block_size = 16;
  if (absl::Status status = PagedAttentionSupported(heads, kv_heads, head_dim, block_size);
      !status.ok()) {
    return Fail(state, status);
  }
  const int64_t blocks_per_seq = (context + block_size - 1) / block_size;
  const int64_t num_blocks = seqs * blocks_per_seq;
  const int64_t cache_elems = num_blocks * block_size * kv_heads * head_dim;
  const int64_t element_bytes = fp8 ? 1 : 2;
  absl::StatusOr<DeviceBuffer<uint8_t>> k_cache =
      DeviceBuffer<uint8_t>::Allocate(cache_elems * element_bytes);
  absl::StatusOr<DeviceBuffer<uint8_t>> v_cache =
      DeviceBuffer<uint8_t>::Allocate(cache_elems * element_bytes);
  absl::StatusOr<DeviceBuffer<bf16>> q = DeviceBuffer<bf16>::Allocate(seqs * heads * head_dim);
  absl::StatusOr<DeviceBuffer<bf16>> out = DeviceBuffer<bf16>::Allocate(seqs * heads * head_dim);
  for (const absl::Status& status :
       {k_cache.status(), v_cache.status(), q.status(), out.status()}) {
    if (!status.ok()) return Fail(state, status);
  }
  // 0x3C: bf16 0.0115 in pairs, E4M3 1.5 alone.
  for (const auto& [data, size] : {std::pair<void*, int64_t>{k_cache->data(), k_cache->bytes()},
                                   {v_cache->data(), v_cache->bytes()},
                                   {q->data(), q->bytes()}}) {
    if (absl::Status status =
            CudaStatus(cudaMemsetAsync(data, 0x3C, size, g_stream->get()), "cudaMemset");
        !status.ok()) {
      return Fail(state, status);
    }
  }
  std::vector<int32_t> query_start(seqs + 1);
  std::iota(query_start.begin(), query_start.end(), 0);
  std::vector<int32_t> context_lens(seqs, static_cast<int32_t>(context));
  std::vector<int32_t> block_tables(num_blocks);
  std::iota(block_tables.begin(), block_tables.end(), 0);
  std::shuffle(block_tables.begin(), block_tables.end(), std::mt19937(1));
  absl::StatusOr<DeviceBuffer<int32_t>> query_start_dev = DeviceBuffer<int32_t>::Allocate(seqs + 1);
  absl::StatusOr<DeviceBuffer<int32_t>> context_lens_dev = DeviceBuffer<int32_t>::Allocate(seqs);
  absl::StatusOr<DeviceBuffer<int32_t>> block_tables_dev =
      DeviceBuffer<int32_t>::Allocate(num_blocks);
  std::vector<int32_t> work(DecodeWorkWords(seqs, heads, kv_heads));
  BuildDecodeWork(context_lens, query_start, heads, kv_heads, work.data());
  absl::StatusOr<DeviceBuffer<int32_t>> work_dev = DeviceBuffer<int32_t>::Allocate(work.size());
  for (const absl::Status& status : {query_start_dev.status(), context_lens_dev.status(),
                                     block_tables_dev.status(), work_dev.status()}) {
    if (!status.ok()) return Fail(state, status);
  }
  for (const absl::Status& status :
       {query_start_dev->CopyFromHost(query_start), context_lens_dev->CopyFromHost(context_lens),
        block_tables_dev->CopyFromHost(block_tables), work_dev->CopyFromHost(work)}) {
    if (!status.ok()) return Fail(state, status);
  }
  const size_t workspace_bytes = PagedAttentionWorkspaceBytes(seqs, heads, kv_heads, head_dim);
  absl::StatusOr<DeviceBuffer<char>> workspace = DeviceBuffer<char>::Allocate(workspace_bytes);
  if (!workspace.ok()) return Fail(state, workspace.status());

  PagedAttentionParams p;
  p.q = q->data();
  if (fp8) {
    p.k_cache_fp8 = k_cache->data();
    p.v_cache_fp8 = v_cache->data();
  } else {
    p.k_cache = reinterpret_cast<const bf16*>(k_cache->data());
    p.v_cache = reinterpret_cast<const bf16*>(v_cache->data());
  }
  p.query_start = query_start_dev->data();
  p.context_lens = context_lens_dev->data();
  p.block_tables = block_tables_dev->data();
  p.out = out->data();
  p.num_tokens = seqs;
  p.max_query_len = 1;
  p.max_context_len = static_cast<int32_t>(context);
  p.num_seqs = seqs;
  p.max_blocks_per_seq = blocks_per_seq;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = block_size;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.decode_work = work_dev->data();
  p.workspace = workspace->data();
  p.workspace_bytes = workspace_bytes;
  // The K and V rows each sequence reads: 2 caches x context x kv_heads x head_dim values.
  const double bytes = 2.0 * element_bytes * seqs * context * kv_heads * head_dim;
  TimeLaunches(state, bytes, [&](int) {
    PagedAttention(p, g_stream->get());
    return CudaStatus(cudaGetLastError(), "PagedAttention launch");
  });
}
#endif  // TPSERVE_BENCH_DECODE_ATTENTION

void RegisterBenchmarks() {
  struct WeightShape {
    int64_t n, k;
  };
  // Llama-3-8B: q_proj/o_proj, gate/up_proj, down_proj, lm_head.
  const WeightShape shapes[] = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}};
  for (const int64_t m : {1, 8}) {
    for (const WeightShape& s : shapes) {
      using Bench = void (*)(benchmark::State&);
      for (const auto& [name, bench] : {std::pair<const char*, Bench>{"BM_GemvBf16", BM_GemvBf16},
                                        std::pair<const char*, Bench>{"BM_GemvFp8", BM_GemvFp8}}) {
        benchmark::RegisterBenchmark(name, bench)
            ->Args({m, s.n, s.k})
            ->ArgNames({"m", "n", "k"})
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
#ifdef TPSERVE_BENCH_DECODE_ATTENTION
  for (const int64_t fp8 : {0, 1}) {
    benchmark::RegisterBenchmark("BM_DecodeAttention", BM_DecodeAttention)
        ->Args({64, 2048, fp8})
        ->ArgNames({"batch", "context", "fp8"})
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
#endif
}

}  // namespace
}  // namespace tpserve::cuda

int main(int argc, char** argv) {
  using namespace tpserve::cuda;
  absl::StatusOr<DeviceInfo> device = QueryDevice();
  if (!device.ok()) {
    std::fprintf(stderr, "tpserve-bench-cuda: %s\n",
                 std::string(device.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::Create();
  absl::StatusOr<CudaStream> stream = CudaStream::Create();
  if (!gemm.ok() || !stream.ok()) {
    std::fprintf(stderr, "tpserve-bench-cuda: %s\n",
                 std::string((gemm.ok() ? stream.status() : gemm.status()).message()).c_str());
    return 1;
  }
  g_device = &*device;
  g_gemm = gemm->get();
  g_stream = &*stream;
  const double datasheet = DatasheetBandwidth(device->name);
  std::fprintf(
      stderr, "tpserve-bench-cuda: %s, peak HBM %.2f TB/s (%s)%s, L2 %lld MB\n",
      device->name.c_str(), device->peak_bytes_per_second / 1e12, device->peak_source.c_str(),
      datasheet > 0.0 ? absl::StrCat("; datasheet ", datasheet / 1e12, " TB/s").c_str() : "",
      static_cast<long long>(device->l2_bytes >> 20));
#ifndef TPSERVE_BENCH_DECODE_ATTENTION
  std::fprintf(stderr,
               "tpserve-bench-cuda: BM_DecodeAttention not built (no "
               "kernels/cuda/paged_attention.h at configure time)\n");
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RegisterBenchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
