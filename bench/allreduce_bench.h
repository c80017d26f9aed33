// What the all-reduce benchmarks (tpserve-bench-gloo, tpserve-bench-shm) share: latency and
// bandwidth of one Communicator's AllReduceSum on this host, for worlds of 2 and 3 processes and
// 4 KiB ... 16 MiB of floats.
//
// This process is rank 0 and runs Google Benchmark; it forks the other ranks, which then loop:
// receive a command (float count, iterations), run exactly that many all-reduces, repeat. The
// command itself travels as a 2-float all-reduce to which the other ranks add zeros, so every rank
// issues the same sequence of collectives whatever iteration counts Google Benchmark picks. A
// command with 0 iterations (sent when the world is replaced or the program ends) makes the
// children exit; they also die with rank 0 (PR_SET_PDEATHSIG) and give up on a collective that
// times out.
//
// bytes_per_second is the buffer size per all-reduce over time ("algorithm bandwidth");
// bus_bytes_per_second multiplies it by 2(n-1)/n, the bytes each rank sends and receives in a
// ring all-reduce, comparable across world sizes (as nccl-tests reports it).
#pragma once

#include <gloo/rendezvous/store.h>

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace tpserve {

// Joins the world as `rank` through `store` (a FileStore in a fresh directory).
using BenchCommunicatorFactory = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
    int rank, int world_size, std::shared_ptr<gloo::rendezvous::Store> store)>;

// The whole program: registers BM_<name>AllReduce over {world, bytes}, runs what the command line
// selects (--benchmark_filter=..., --benchmark_min_time=...), stops the followers. Returns the
// exit status.
int RunAllReduceBenchmarks(int argc, char** argv, const char* name,
                           BenchCommunicatorFactory factory);

}  // namespace tpserve
