// Round-trip cost of one engine step through a real cluster on 127.0.0.1: the coordinator plans
// a decode step, sends StepRequest to every worker over gRPC, the workers run a 1-layer synthetic
// model (two all-reduces per layer at T > 1), rank 0 samples and answers. The model is tiny, so
// the time is almost all overhead: gRPC, collectives, scheduling. BM_StepRoundTrip/auto lets the
// workers choose their transport as they do by default (shared memory on one host, where the
// coordinator sends each step to rank 0 alone, which relays it to the others through the
// segment); BM_StepRoundTrip/every_rank sends each step to every rank over gRPC
// (--no-step-relay); BM_StepRoundTrip/gloo forces Gloo over TCP, each step to every rank.
//
//   tpserve-bench-step [--benchmark_filter=...]
//
// One iteration is a Generate of kSteps tokens with one sequence; step_us is its time per step.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "cli/local_cluster.h"
#include "grpcpp/grpcpp.h"
#include "model/synthetic_model.h"

namespace tpserve {
namespace {

constexpr int kSteps = 32;

std::string BinDir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

// The model is written once per process; 6 heads and 3 KV heads split at T = 1 and 3. Q8_0, so
// that the step runs the packed kernels that quantized models (what is served) run.
const std::string& ModelPath() {
  static const std::string* path = [] {
    auto* p = new std::string("/tmp/tpserve-step-bench-" + std::to_string(getpid()) + ".gguf");
    SyntheticModelSpec spec;
    spec.layers = 1;
    spec.hidden = 384;
    spec.heads = 6;
    spec.kv_heads = 3;
    spec.ffn = 768;
    spec.vocab = 512;
    spec.dtype = GgmlType::kQ8_0;
    const absl::Status status = WriteSyntheticModel(spec, *p);
    if (!status.ok()) {
      std::fprintf(stderr, "step bench: %s\n", std::string(status.message()).c_str());
      std::exit(1);
    }
    return p;
  }();
  return *path;
}

// `cpu_comm`: the workers' --cpu-comm; `relay`: whether the coordinator may relay steps.
void BM_StepRoundTrip(benchmark::State& state, const char* cpu_comm, bool relay) {
  const int world = static_cast<int>(state.range(0));
  LocalClusterOptions options;
  options.worker_args = {"--cpu-comm", cpu_comm};
  if (!relay) options.coordinator_args = {"--no-step-relay"};
  options.bin_dir = BinDir();
  options.model = ModelPath();
  options.world_size = world;
  char log_dir[] = "/tmp/tpserve-step-bench-XXXXXX";
  options.log_dir = mkdtemp(log_dir);
  auto cluster = LocalCluster::Start(options);
  if (!cluster.ok() || !(*cluster)->WaitReady(absl::Seconds(60)).ok()) {
    state.SkipWithError("the cluster did not start");
    return;
  }
  struct RemoveLogs {
    std::string dir;
    ~RemoveLogs() { std::filesystem::remove_all(dir); }
  } remove_logs{options.log_dir};
  v1::GenerateRequest request;
  for (int32_t id : {1, 50, 60, 70}) request.mutable_token_ids()->add_ids(id);
  request.set_max_tokens(kSteps);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0.0f);
  const absl::Time start = absl::Now();
  for (auto _ : state) {
    grpc::ClientContext context;
    auto reader = (*cluster)->inference().Generate(&context, request);
    v1::GenerateResponse chunk;
    while (reader->Read(&chunk)) {
    }
    if (!reader->Finish().ok()) {
      state.SkipWithError("Generate failed");
      return;
    }
  }
  if (world > 1) state.SetLabel((*cluster)->WorkerCpuTransport(0));
  state.counters["step_us"] = absl::ToDoubleMicroseconds(absl::Now() - start) /
                              (static_cast<double>(state.iterations()) * kSteps);
}
BENCHMARK_CAPTURE(BM_StepRoundTrip, auto, "auto", true)
    ->Arg(1)
    ->Arg(3)
    ->Iterations(8)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StepRoundTrip, every_rank, "auto", false)
    ->Arg(3)
    ->Iterations(8)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StepRoundTrip, gloo, "gloo", false)
    ->Arg(3)
    ->Iterations(8)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove(tpserve::ModelPath());
  return 0;
}
