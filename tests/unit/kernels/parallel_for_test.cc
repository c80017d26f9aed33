#include "kernels/cpu/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kernels/cpu/threads.h"

namespace tpserve::cpu {
namespace {

// Every index exactly once, in chunks of `grain` that start on multiples of it.
void ExpectEachIndexOnce(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> seen(n);
  std::atomic<int64_t> bad_chunks{0};
  ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
    if (begin % grain != 0 || end - begin > grain || end <= begin || end > n) ++bad_chunks;
    for (int64_t i = begin; i < end; ++i) seen[i].fetch_add(1);
  });
  EXPECT_EQ(bad_chunks.load(), 0) << "n=" << n << " grain=" << grain;
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "index " << i << " n=" << n;
}

TEST(ParallelForTest, CoversEveryIndexOnce) {
  for (int64_t n : {0, 1, 2, 7, 64, 1000, 100003}) {
    for (int64_t grain : {1, 3, 64, 200000}) ExpectEachIndexOnce(n, grain);
  }
}

// More chunks than the ticket can count: the grain grows, coverage stays exact.
TEST(ParallelForTest, HugeRangesGetCoarserChunks) {
  std::atomic<int64_t> sum{0}, chunks{0};
  const int64_t n = int64_t{3} << 20;
  ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
    sum += end - begin;
    ++chunks;
  });
  EXPECT_EQ(sum.load(), n);
  EXPECT_LT(chunks.load(), int64_t{1} << 20);
}

// Many short calls back to back: the hand-over between calls (spin, then futex) loses none.
TEST(ParallelForTest, ManyShortCallsInARow) {
  std::atomic<int64_t> total{0};
  for (int call = 0; call < 20000; ++call) {
    ParallelFor(8, 1, [&](int64_t begin, int64_t end) { total += end - begin; });
  }
  EXPECT_EQ(total.load(), 20000 * 8);
}

// Calls separated by pauses longer than the spin, so the idle threads are asleep in the futex
// each time and must be woken.
TEST(ParallelForTest, WakesSleepingThreads) {
  SetCpuThreads(2);
  std::set<std::thread::id> ids;
  std::mutex mu;
  for (int call = 0; call < 20; ++call) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::atomic<int64_t> total{0};
    ParallelFor(64, 1, [&](int64_t begin, int64_t end) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      total += end - begin;
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
    ASSERT_EQ(total.load(), 64);
  }
  // Chunks that sleep leave the caller idle time to hand work to the second thread.
  EXPECT_EQ(ids.size(), 2u);
  SetCpuThreads(0);
}

TEST(ParallelForTest, NestedAndConcurrentCallsRunInline) {
  std::atomic<int64_t> inner{0};
  ParallelFor(16, 1, [&](int64_t, int64_t) {
    ParallelFor(10, 1, [&](int64_t begin, int64_t end) { inner += end - begin; });
  });
  EXPECT_EQ(inner.load(), 160);

  std::atomic<int64_t> a{0}, b{0};
  std::thread other([&] {
    for (int i = 0; i < 2000; ++i) ParallelFor(32, 2, [&](int64_t s, int64_t e) { a += e - s; });
  });
  for (int i = 0; i < 2000; ++i) ParallelFor(32, 2, [&](int64_t s, int64_t e) { b += e - s; });
  other.join();
  EXPECT_EQ(a.load(), 2000 * 32);
  EXPECT_EQ(b.load(), 2000 * 32);
}

}  // namespace
}  // namespace tpserve::cpu
