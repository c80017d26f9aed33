#include "bench/allreduce_bench.h"

#include <benchmark/benchmark.h>
#include <gloo/rendezvous/file_store.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tpserve {
namespace {

// Commands travel as floats: integers up to 2^24 are exact.
constexpr int64_t kMaxCommandValue = int64_t{1} << 24;

// Ranks 1..n-1: follow rank 0's commands until told to stop or the group breaks.
[[noreturn]] void RunFollower(const BenchCommunicatorFactory& factory, int rank, int world_size,
                              const std::string& store_dir) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto comm = factory(rank, world_size, std::make_shared<gloo::rendezvous::FileStore>(store_dir));
  if (!comm.ok()) {
    std::fprintf(stderr, "follower: %s\n", comm.status().ToString().c_str());
    _exit(1);
  }
  std::vector<float> data;
  for (;;) {
    float command[2] = {0.0f, 0.0f};  // {float count, iterations}
    if (!(*comm)->AllReduceSum(command, 2).ok()) _exit(1);
    const auto count = static_cast<int64_t>(command[0]);
    const auto iterations = static_cast<int64_t>(command[1]);
    if (iterations == 0) _exit(0);
    data.assign(count, 0.0f);
    for (int64_t i = 0; i < iterations; ++i) {
      absl::Status status = (*comm)->AllReduceSum(data.data(), count);
      if (!status.ok()) {
        std::fprintf(stderr, "follower: %s\n", status.ToString().c_str());
        _exit(1);
      }
    }
  }
}

// Rank 0's view of one world: the communicator, the forked followers and the rendezvous directory,
// all released (followers stopped and reaped, directory removed) on destruction.
class BenchWorld {
 public:
  static absl::StatusOr<std::unique_ptr<BenchWorld>> Start(const BenchCommunicatorFactory& factory,
                                                           int world_size) {
    std::unique_ptr<BenchWorld> world(new BenchWorld());
    world->store_dir_ = "/tmp/allreduce_bench.XXXXXX";
    if (mkdtemp(world->store_dir_.data()) == nullptr) {
      world->store_dir_.clear();
      return absl::InternalError("mkdtemp failed for the rendezvous directory");
    }
    std::fflush(nullptr);
    for (int rank = 1; rank < world_size; ++rank) {
      const pid_t pid = fork();
      if (pid < 0) return absl::InternalError("fork failed");
      if (pid == 0) RunFollower(factory, rank, world_size, world->store_dir_);
      world->followers_.push_back(pid);
    }
    auto comm =
        factory(0, world_size, std::make_shared<gloo::rendezvous::FileStore>(world->store_dir_));
    if (!comm.ok()) return comm.status();
    world->comm_ = *std::move(comm);
    return world;
  }

  ~BenchWorld() {
    if (comm_ != nullptr) Announce(0, 0).IgnoreError();
    comm_.reset();
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    for (const pid_t pid : followers_) {
      while (waitpid(pid, nullptr, WNOHANG) == 0) {
        if (absl::Now() > deadline) {
          kill(pid, SIGKILL);
          waitpid(pid, nullptr, 0);
          break;
        }
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
    std::error_code ignored;
    if (!store_dir_.empty()) std::filesystem::remove_all(store_dir_, ignored);
  }

  // Tells the followers to run `iterations` all-reduces of `count` floats (0 iterations: exit).
  absl::Status Announce(int64_t count, int64_t iterations) {
    if (count >= kMaxCommandValue || iterations >= kMaxCommandValue) {
      return absl::OutOfRangeError("command values must stay below 2^24");
    }
    float command[2] = {static_cast<float>(count), static_cast<float>(iterations)};
    return comm_->AllReduceSum(command, 2);
  }

  Communicator& comm() { return *comm_; }
  int world_size() const { return comm_->world_size(); }

 private:
  BenchWorld() = default;

  std::string store_dir_;
  std::vector<pid_t> followers_;
  std::unique_ptr<Communicator> comm_;
};

// The current world; replaced when a benchmark needs another size, released at the end.
std::unique_ptr<BenchWorld> g_world;

absl::StatusOr<BenchWorld*> WorldOf(const BenchCommunicatorFactory& factory, int world_size) {
  if (g_world == nullptr || g_world->world_size() != world_size) {
    g_world.reset();  // Stop the old followers before forking new ones.
    auto world = BenchWorld::Start(factory, world_size);
    if (!world.ok()) return world.status();
    g_world = *std::move(world);
  }
  return g_world.get();
}

// Args: {world size, bytes per all-reduce}.
void BM_AllReduce(benchmark::State& state, const BenchCommunicatorFactory& factory) {
  const int world_size = static_cast<int>(state.range(0));
  const int64_t bytes = state.range(1);
  const int64_t count = bytes / static_cast<int64_t>(sizeof(float));
  absl::StatusOr<BenchWorld*> world = WorldOf(factory, world_size);
  if (!world.ok()) {
    state.SkipWithError(world.status().ToString().c_str());
    return;
  }
  std::vector<float> data(count, 0.0f);
  if (absl::Status status = (*world)->Announce(count, state.max_iterations); !status.ok()) {
    g_world.reset();
    state.SkipWithError(status.ToString().c_str());
    return;
  }
  for (auto _ : state) {
    absl::Status status = (*world)->comm().AllReduceSum(data.data(), count);
    if (!status.ok()) {
      g_world.reset();  // The followers are out of step now; start afresh next time.
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["bus_bytes_per_second"] = benchmark::Counter(
      static_cast<double>(state.iterations() * bytes) * 2 * (world_size - 1) / world_size,
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
}

}  // namespace

int RunAllReduceBenchmarks(int argc, char** argv, const char* name,
                           BenchCommunicatorFactory factory) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // World-major order, so that each world is forked once.
  benchmark::RegisterBenchmark(absl::StrCat("BM_", name, "AllReduce").c_str(), BM_AllReduce,
                               std::move(factory))
      ->ArgNames({"world", "bytes"})
      ->Args({2, 4 << 10})
      ->Args({2, 64 << 10})
      ->Args({2, 1 << 20})
      ->Args({2, 16 << 20})
      ->Args({3, 4 << 10})
      ->Args({3, 64 << 10})
      ->Args({3, 1 << 20})
      ->Args({3, 16 << 20})
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RunSpecifiedBenchmarks();
  g_world.reset();  // Stops and reaps the follower processes.
  benchmark::Shutdown();
  return 0;
}

}  // namespace tpserve
