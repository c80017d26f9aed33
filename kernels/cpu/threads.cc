#include "kernels/cpu/threads.h"

#include <cblas.h>
#include <sched.h>

#include <atomic>
#include <thread>

namespace tpserve::cpu {
namespace {

std::atomic<int> g_threads{0};  // 0: not set

}  // namespace

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

void SetCpuThreads(int threads) {
  const int n = threads > 0 ? threads : AvailableCores();
  g_threads.store(n, std::memory_order_relaxed);
  openblas_set_num_threads(n);
}

int CpuThreads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : AvailableCores();
}

}  // namespace tpserve::cpu
