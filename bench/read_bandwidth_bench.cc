// The machine's memory read bandwidth: the bound a batch-1 decode meets, since each token reads
// every weight once. Each thread sums its slice of a buffer far larger than the caches with
// 64-byte vector loads, in rounds that alternate the hardware prefetchers alone with software
// prefetches 1 and 4 KiB ahead; the best round is the bound (the median shows the noise).
//   tpserve-bench-bandwidth [--gib 1] [--threads 0 (every core)] [--rounds 9]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

// Four vector sums, each load's line asked for `ahead` bytes early as the decode kernels ask for
// their weights (0: the hardware prefetchers alone). The loads, not an add chain, set the pace.
__attribute__((noinline)) uint64_t SumSlice(const uint64_t* data, size_t words, size_t ahead) {
  using V = uint64_t __attribute__((vector_size(64)));
  V acc[4] = {};
  const size_t ahead_words = ahead / 8;
  for (size_t i = 0; i + 32 <= words; i += 32) {
    if (ahead_words > 0) {
      for (int j = 0; j < 4; ++j) __builtin_prefetch(data + i + ahead_words + 8 * j);
    }
    for (int j = 0; j < 4; ++j) {
      V v;
      __builtin_memcpy(&v, data + i + 8 * j, sizeof(v));
      acc[j] += v;
    }
  }
  uint64_t total = 0;
  for (const V& a : acc) {
    for (int j = 0; j < 8; ++j) total += a[j];
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1;
  int threads = 0, rounds = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--gib") == 0)
      gib = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--threads") == 0)
      threads = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--rounds") == 0)
      rounds = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--gib G] [--threads T] [--rounds R]\n", argv[0]);
      return 2;
    }
  }
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  const size_t words = static_cast<size_t>(gib * (1ull << 30)) / 8 / (32 * threads) * 32 * threads;
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
    const size_t ahead = (r % 3 == 0) ? 0 : (r % 3 == 1 ? 1024 : 4096);
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] { sums[t] = SumSlice(buffer.data() + t * slice, slice, ahead); });
    }
    for (std::thread& t : pool) t.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (uint64_t s : sums) sink += s;
    rates.push_back(words * 8 / seconds / 1e9);
    std::fprintf(stderr, "bandwidth: round %d/%d (prefetch %zu bytes ahead): %.1f GB/s\n", r + 1,
                 rounds, ahead, rates.back());
  }
  std::sort(rates.begin(), rates.end());
  std::printf("read bandwidth, %d threads over %.2f GiB: best %.1f GB/s, median %.1f GB/s%s\n",
              threads, words * 8 / double(1ull << 30), rates.back(), rates[rates.size() / 2],
              sink == 42 ? " " : "");
  return 0;
}
