// How many threads the CPU kernels use (OpenMP regions and OpenBLAS, which share one pool).
#pragma once

namespace tpserve::cpu {

// Sets the thread count of this process's CPU kernels; 0 means every core. Several ranks on one
// host must split the cores between them: oversubscribed spinning threads stall each other.
// Applies to every thread: OpenMP's own setting is per calling thread, so each parallel region
// names CpuThreads() explicitly.
void SetCpuThreads(int threads);

// The thread count for a parallel region: what SetCpuThreads chose (every core before that).
int CpuThreads();

// The number of cores this process may run on.
int AvailableCores();

}  // namespace tpserve::cpu
