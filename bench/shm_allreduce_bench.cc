// ShmCommunicator::AllReduceSum through shared memory (how it runs: bench/allreduce_bench.h).
//
//   tpserve-bench-shm [--benchmark_filter=...] [--benchmark_min_time=...]
#include "absl/time/time.h"
#include "bench/allreduce_bench.h"
#include "worker/comm/shm_communicator.h"

int main(int argc, char** argv) {
  return tpserve::RunAllReduceBenchmarks(
      argc, argv, "Shm",
      [](int rank, int world_size, std::shared_ptr<gloo::rendezvous::Store> store)
          -> absl::StatusOr<std::unique_ptr<tpserve::Communicator>> {
        tpserve::ShmOptions options;
        options.connect_timeout = absl::Seconds(30);
        options.operation_timeout = absl::Seconds(30);
        return tpserve::ShmCommunicator::Create(rank, world_size, std::move(store), options);
      });
}
