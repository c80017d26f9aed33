// The CPU kernels' own thread pool: ParallelFor hands out chunks of an index range to
// CpuThreads() threads, the caller one of them.
//
// Why not OpenMP: a fork-join region ends at a barrier that waits for every thread of the team,
// so on a machine whose cores are shared (other ranks, other processes) one descheduled thread
// stalls every region for a scheduler slice; a step runs hundreds of regions, and decode fell from
// ~110 to ~20 tok/s next to a busy neighbour. Here a call returns when its chunks are done, by
// whichever threads took them: a thread that wakes late finds nothing left and goes back to sleep.
// Idle threads spin for a few tens of microseconds (the gap between a step's kernels), then block
// on a futex, so a quiet machine keeps spin-wait latency and a busy one gets its cores back.
#pragma once

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace tpserve::cpu {

// Runs fn(begin, end) over [0, n) in chunks of `grain` items (the last one shorter), on up to
// CpuThreads() threads including the caller, and returns when every chunk has run. Chunks go to
// threads in no fixed order: fn must not depend on which thread runs what. A call from inside a
// chunk, or while another thread's call holds the pool, runs on the calling thread alone.
void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn);

// A grain that splits n items into about four chunks per thread: enough that a descheduled
// thread's share goes to the others, few enough that handing them out costs nothing.
int64_t FewChunksPerThread(int64_t n);

}  // namespace tpserve::cpu
