// How many threads the CPU kernels use: ParallelFor's pool (parallel_for.h) and OpenBLAS's own,
// which runs the fp32 products.
#pragma once

namespace tpserve::cpu {

// Sets the thread count of this process's CPU kernels; 0 means every core. Several ranks on one
// host must split the cores between them: more threads than cores only wait on each other.
void SetCpuThreads(int threads);

// The thread count for a parallel region: what SetCpuThreads chose (every core before that).
int CpuThreads();

// The number of cores this process may run on.
int AvailableCores();

}  // namespace tpserve::cpu
