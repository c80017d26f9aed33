// The machine's memory read bandwidth: the bound a batch-1 decode meets, since each token reads
// every weight once. Each thread sums its slice of a buffer far larger than the caches with
// 64-byte vector loads; the best of the rounds is the bound (the median shows the noise).
//   tpserve-bench-bandwidth [--gib 1] [--threads 0 (every core)] [--rounds 7]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

// 16 independent sums: the loads, not an add chain, set the pace. The compiler keeps them in
// vector registers (8 x 64-bit lanes per 512-bit load where the target has it).
__attribute__((noinline)) uint64_t SumSlice(const uint64_t* data, size_t words) {
  uint64_t acc[16] = {};
  for (size_t i = 0; i + 16 <= words; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += data[i + j];
  }
  uint64_t total = 0;
  for (uint64_t a : acc) total += a;
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1;
  int threads = 0, rounds = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--gib") == 0) gib = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--gib G] [--threads T] [--rounds R]\n", argv[0]);
      return 2;
    }
  }
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  const size_t words = static_cast<size_t>(gib * (1ull << 30)) / 8 / (16 * threads) * 16 * threads;
  if (words == 0 || rounds <= 0) {
    std::fprintf(stderr, "bandwidth: nothing to read\n");
    return 2;
  }
  std::vector<uint64_t> buffer(words);
  for (size_t i = 0; i < words; ++i) buffer[i] = i;  // every page mapped before timing
  std::vector<double> rates;
  uint64_t sink = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<uint64_t> sums(threads);
    std::vector<std::thread> pool;
    const size_t slice = words / threads;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] { sums[t] = SumSlice(buffer.data() + t * slice, slice); });
    }
    for (std::thread& t : pool) t.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (uint64_t s : sums) sink += s;
    rates.push_back(words * 8 / seconds / 1e9);
    std::fprintf(stderr, "bandwidth: round %d/%d: %.1f GB/s\n", r + 1, rounds, rates.back());
  }
  std::sort(rates.begin(), rates.end());
  std::printf("read bandwidth, %d threads over %.2f GiB: best %.1f GB/s, median %.1f GB/s%s\n",
              threads, words * 8 / double(1ull << 30), rates.back(), rates[rates.size() / 2],
              sink == 42 ? " " : "");
  return 0;
}
