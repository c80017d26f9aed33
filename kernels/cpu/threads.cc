#include "kernels/cpu/threads.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>

#include <thread>

namespace tpserve::cpu {

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

void SetCpuThreads(int threads) {
  const int n = threads > 0 ? threads : AvailableCores();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

}  // namespace tpserve::cpu
