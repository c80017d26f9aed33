// GlooCommunicator::AllReduceSum over TCP on 127.0.0.1 (how it runs: bench/allreduce_bench.h).
//
//   tpserve-bench-gloo [--benchmark_filter=...] [--benchmark_min_time=...]
#include "absl/time/time.h"
#include "bench/allreduce_bench.h"
#include "worker/comm/gloo_communicator.h"

int main(int argc, char** argv) {
  return tpserve::RunAllReduceBenchmarks(
      argc, argv, "Gloo",
      [](int rank, int world_size, std::shared_ptr<gloo::rendezvous::Store> store)
          -> absl::StatusOr<std::unique_ptr<tpserve::Communicator>> {
        tpserve::GlooOptions options;
        options.host = "127.0.0.1";
        options.connect_timeout = absl::Seconds(30);
        options.operation_timeout = absl::Seconds(30);
        return tpserve::GlooCommunicator::Create(rank, world_size, std::move(store), options);
      });
}
